package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv/memengine"
)

// internalService is a service of shards on the memory backend with a
// rule of 1,000/s per user in domain q. Its shard loops never run: a
// manual one serves each message as it is posted, another keeps them in
// its lanes for the test to look at, or drives the shards itself.
func internalService(t *testing.T, shards int, manual bool) (*Service, *engine.Service) {
	t.Helper()
	e := memengine.New(t, memengine.Rules1000, memory.Options{})
	st0, eng := e.Stats, e.Service
	o := DefaultOptions()
	o.Shards = shards
	s, err := newService(o, eng, e.Counter, nil, st0, manual)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, eng
}

// usagesOf are young young usages (no time elapsed: buckets just made)
// after old ones (a report period each), named after name.
func usagesOf(name string, old, young int) []Usage {
	var us []Usage
	for i := range old + young {
		u := Usage{Bucket: alloc.BucketOf(map[string]string{"user": fmt.Sprint(name, i)})}
		if i < old {
			u.Elapsed, u.Allowed = 5*time.Second, 10
		}
		us = append(us, u)
	}
	return us
}

// TestYoungBucketsOfALargeReportComeAlone: a large report's few young
// buckets (usage over less than MinElapsed: just made by the Envoy, which
// applies its no_assignment_behavior until answered) reach the shard
// first, as a small report of their own: what the Envoy's immediate
// report would have been, which the shard takes and serves between a
// backlog's hubs (express). In a chunk of the report they waited for the
// shard to finish whatever it was serving. A flood's first chunk, all
// young, is not a small report.
func TestYoungBucketsOfALargeReportComeAlone(t *testing.T) {
	s, _ := internalService(t, 1, false)
	in := s.shards[0].in
	for _, tc := range []struct {
		name       string
		old, young int
		first      int // usages in the lane's first message
	}{
		{"one young bucket after 63 old", 63, 1, 1},
		{"four young after 60 old", 60, 4, 4},
		{"a flood's subscriptions: 64 young", 0, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := s.Open(discardSink{})
			if err := st.Report(time.Now(), "q", usagesOf(tc.name, tc.old, tc.young)); err != nil {
				t.Fatal(err)
			}
			q := in.lanes[st].q
			if len(q) == 0 || len(q[0].usages) != tc.first {
				t.Fatalf("lane's first message: %d usages (of %d messages), want %d", len(q[0].usages), len(q), tc.first)
			}
			for _, u := range q[0].usages {
				if u.Elapsed >= alloc.MinElapsed {
					t.Errorf("first message holds %s, not young", u.Bucket)
				}
			}
			m, ok := in.take(true) // what a busy shard takes between hubs
			if small := tc.young <= expressUsages; ok != small || ok && m.st != st {
				t.Errorf("an express take found a message %v (its stream's: %v), want %v", ok, ok && m.st == st, small)
			}
			for ok := true; ok; _, ok = in.take(false) {
			}
		})
	}
}

// TestInterleaveSendsWaitingExpressOps: a shard looking for express work
// in the middle of a backlog (interleave) sends the express operations
// waiting, also those of an express hub it served in the backlog's own
// order (a large report's young buckets come first): the young bucket's
// reservation waited for the whole batch of 256 hubs to be planned.
func TestInterleaveSendsWaitingExpressOps(t *testing.T) {
	s, eng := internalService(t, 1, false)
	sh := s.shards[0]
	sh.cfg = eng.Config()
	st := s.Open(discardSink{})
	st.domain = "q" // as its first Report would
	now := time.Now()
	var young, old []usageAt
	for i, u := range usagesOf("u", 63, 1) {
		ua := usageAt{key: "q\x00" + string(u.Bucket), Usage: u}
		if i < 63 {
			old = append(old, ua)
		} else {
			young = append(young, ua)
		}
	}
	sh.handle(msg{kind: msgReport, st: st, at: now, info: st.info, usages: young})
	sh.handle(msg{kind: msgReport, st: st, at: now, info: st.info, usages: old})
	if h := sh.hubs[young[0].key]; h == nil || !h.express {
		t.Fatal("the young bucket's small report did not make its hub express")
	}
	for _, h := range sh.dirty[:expressEvery] {
		if h.queued {
			h.queued = false
			sh.serve(h, now)
		}
	}
	sh.interleave()
	if !sh.xcalling {
		t.Errorf("after %d hubs served, the young bucket's reservation (%d operations) waits for the rest of the batch", expressEvery, len(sh.xops))
	}
	if sh.xcalling {
		sh.handle(<-sh.results)
	}
	sh.finish(now)
	if sh.calling {
		sh.handle(<-sh.results)
	}
}
