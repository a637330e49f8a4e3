package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
)

// TestYoungBucketsOfALargeReportAreExpress: a large report's few young
// buckets (usage over less than MinElapsed: just made by the Envoy, which
// applies its no_assignment_behavior until answered) are what its
// immediate report would have carried, and go the express way: their
// reservations leave in an express call as soon as the shard looks for
// express work, not after the rest of the batch is planned (a new bucket
// of a 1,000-bucket report waited 25-40 ms for its batch of 256 hubs). A
// flood's first chunk of young buckets is not express.
func TestYoungBucketsOfALargeReportAreExpress(t *testing.T) {
	st0 := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte("domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n")}}, engine.ConfigOptions{Stats: st0})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(time.Now)
	defer store.Close()
	eo := engine.DefaultOptions()
	eo.Counter, eo.Stats = engine.DirectCounter{Backend: store}, st0
	eng, err := engine.NewService(eo)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetConfig(cfg)
	o := DefaultOptions()
	o.Shards = 1
	// A manual service's shard, driven here as its loop would drive it.
	s, err := newService(o, eng, eo.Counter, nil, st0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.manual = false
	sh := s.shards[0]
	sh.in, sh.results, sh.cfg = newIntake(time.Now), make(chan msg, 3), eng.Config()
	st := s.Open(discardSink{})
	st.domain = "q" // as its first Report would
	now := time.Now()

	for _, tc := range []struct {
		name       string
		young, old int
		express    bool
	}{
		{"one young bucket before 63 old", 1, 63, true},
		{"four young before 60 old", 4, 60, true},
		{"a flood's subscriptions: 64 young", 64, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var us []usageAt
			for i := range tc.young + tc.old {
				u := Usage{Bucket: alloc.BucketOf(map[string]string{"user": fmt.Sprint(tc.name, i)})}
				if i >= tc.young {
					u.Elapsed, u.Allowed = 5*time.Second, 10
				}
				us = append(us, usageAt{key: "q\x00" + string(u.Bucket), Usage: u})
			}
			sh.handle(msg{kind: msgReport, st: st, at: now, info: st.info, usages: us})
			for i, u := range us {
				h := sh.hubs[u.key]
				if h == nil {
					t.Fatalf("usage %d made no hub", i)
				}
				if want := tc.express && i < tc.young; h.express != want {
					t.Errorf("usage %d (young %v): express %v, want %v", i, i < tc.young, h.express, want)
				}
			}
			// The shard serves its dirty hubs in order, the young ones
			// first, and looks for express work every expressEvery hubs:
			// the young ones' reservations leave then.
			for _, h := range sh.dirty[:min(len(sh.dirty), expressEvery)] {
				if h.queued {
					h.queued = false
					sh.serve(h, now)
				}
			}
			sh.interleave()
			if tc.express && !sh.xcalling {
				t.Errorf("after %d hubs served, the young buckets' reservations (%d operations) wait for the rest of the batch", expressEvery, len(sh.xops))
			}
			if sh.xcalling {
				sh.handle(<-sh.results)
			}
			sh.finish(now)
			if sh.calling {
				sh.handle(<-sh.results)
			}
		})
	}
}
