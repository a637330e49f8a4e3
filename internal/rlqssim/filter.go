package rlqssim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bucketKey names a BucketId independently of its map's order (Envoy
// treats {a, b} and {b, a} as one bucket).
func bucketKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(m[k])
		sb.WriteByte(0)
	}
	return sb.String()
}

// Received is one bucket action as a simulated Envoy got it.
type Received struct {
	At       time.Time
	Bucket   int // index into Config.Buckets; -1 when it is none of them
	Abandon  bool
	Strategy Strategy      // of an assignment
	TTL      time.Duration // of an assignment, whole seconds
	Ignored  string        // why the filter ignored it; empty when applied
}

// fleetBuckets are the BucketIds every simulated Envoy may match requests
// into, shared read-only by the fleet.
type fleetBuckets struct {
	domain string
	ids    []*rlqsv3.BucketId
	index  map[string]int
	bh     behaviours
}

// filter is one Envoy's rate_limit_quota filter without its stream: the
// buckets it tracks, by index into fleetBuckets.ids. Not safe for
// concurrent use; its owner locks.
type filter struct {
	fb      *fleetBuckets
	buckets map[int]*bucket
}

func newFilter(fb *fleetBuckets) *filter {
	return &filter{fb: fb, buckets: map[int]*bucket{}}
}

// request decides one request matched into bucket i. The first request
// into an untracked bucket creates it in the no-assignment state and
// returns the subscription report to send at once: that bucket alone,
// counting this request, its time_elapsed zero.
func (f *filter) request(i int, now time.Time) (bool, *rlqsv3.RateLimitQuotaUsageReports) {
	b, ok := f.buckets[i]
	if ok {
		return b.admit(f.fb.bh, now), nil
	}
	b = newBucket(f.fb.bh, now)
	f.buckets[i] = b
	allowed := b.admit(f.fb.bh, now)
	return allowed, &rlqsv3.RateLimitQuotaUsageReports{Domain: f.fb.domain,
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{f.usage(i, b, now)}}
}

func (f *filter) usage(i int, b *bucket, now time.Time) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	allowed, denied, elapsed := b.takeReport(now)
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: f.fb.ids[i],
		TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// report is the periodic message: every tracked bucket, counters reset.
// Nil when nothing is tracked (Envoy then sends nothing).
func (f *filter) report(now time.Time) *rlqsv3.RateLimitQuotaUsageReports {
	if len(f.buckets) == 0 {
		return nil
	}
	idx := make([]int, 0, len(f.buckets))
	for i := range f.buckets {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: f.fb.domain,
		BucketQuotaUsages: make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, 0, len(idx))}
	for _, i := range idx {
		b := f.buckets[i]
		b.advance(f.fb.bh, now)
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, f.usage(i, b, now))
	}
	return m
}

// apply applies a response's actions in order, as the filter does, and
// returns them as received.
func (f *filter) apply(resp *rlqsv3.RateLimitQuotaResponse, now time.Time) []Received {
	out := make([]Received, 0, len(resp.GetBucketAction()))
	for _, a := range resp.GetBucketAction() {
		out = append(out, f.applyOne(a, now))
	}
	return out
}

func (f *filter) applyOne(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) Received {
	r := Received{At: now, Bucket: -1}
	i, known := f.fb.index[bucketKey(a.GetBucketId().GetBucket())]
	if known {
		r.Bucket = i
	}
	b, tracked := f.buckets[i]
	tracked = tracked && known
	switch act := a.GetBucketAction().(type) {
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
		r.Abandon = true
		if !tracked {
			r.Ignored = "abandon of an untracked bucket"
			return r
		}
		delete(f.buckets, i)
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
		qa := act.QuotaAssignmentAction
		r.TTL = time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second
		s, err := fromProto(qa.GetRateLimitStrategy())
		r.Strategy = s.Strategy
		switch {
		case err != nil:
			r.Ignored = err.Error()
		case !tracked:
			r.Ignored = "assignment to an untracked bucket"
		default:
			b.assign(f.fb.bh, s, r.TTL, now)
		}
	default:
		r.Ignored = fmt.Sprintf("bucket action not set (%T)", act)
	}
	return r
}

// reset drops every bucket: the Envoy restarted.
func (f *filter) reset() { clear(f.buckets) }

func (f *filter) view(i int, now time.Time) BucketView {
	b, ok := f.buckets[i]
	if !ok {
		return BucketView{}
	}
	return b.view(f.fb.bh, now)
}
