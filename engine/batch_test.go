package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
)

// batchRequests are requests a gateway might send together: repeated keys
// (each must see the count of those before it), a key pushed over its
// limit, bad requests among good ones, unlimited and unmatched descriptors,
// other algorithms, and more descriptors than a decision keeps inline.
func batchRequests() []*engine.Request {
	return []*engine.Request{
		req("probe", kv("k", "two")),
		req("probe", kv("k", "two"), kv("near", "s")),
		req("", kv("k", "two")), // no domain: its own error
		req("probe", kv("k", "two")),
		req("probe", kv("free", "x"), kv("zzz", "y")), // nothing to count
		req("probe"), // no descriptors
		req("algo", kv("sw", "a")),
		req("algo", kv("tb", "a")),
		req("algo", kv("tb", "a"), kv("fw", "a")),
		req("probe", kv("near", "1"), kv("near", "2"), kv("near", "3"), kv("near", "4"), kv("k", "hour5")),
		{Domain: "probe", Descriptors: []engine.Descriptor{{Entries: kv("near", "h"), HitsAddend: u64(4)}}},
		{Domain: "probe", Descriptors: []engine.Descriptor{{Entries: kv("near", "h"), HitsAddend: u64(7)}}},
		req("probe", kv("k", "two")),
	}
}

func outcome(resp *engine.Response, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return showAll(resp)
}

func statsOf(s *stats.Store) string {
	var b strings.Builder
	s.Each(func(v stats.Value) {
		if v.Counter != nil && v.Counter.Value() != 0 {
			fmt.Fprintf(&b, "%s=%d\n", v.Name, v.Counter.Value())
		}
	})
	return b.String()
}

// TestBatchDecidesAsOneByOne: a batch answers, counts and keeps statistics
// exactly as the same requests sent one after another, with one counter call
// for all of them.
func TestBatchDecidesAsOneByOne(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop increment on limit %v", stop), func(t *testing.T) {
			mutate := func(o *engine.Options) { o.StopIncrementOnLimit = stop }
			one := newFixture(t, mutate, "probe.yaml", "algorithms.yaml")
			batch := newFixture(t, mutate, "probe.yaml", "algorithms.yaml")
			reqs := batchRequests()
			items := make([]engine.BatchItem, len(reqs))
			for i, r := range reqs {
				items[i].Req = r
			}
			if stop {
				// Each request is decided on its own goroutine: their order
				// among themselves is not kept, so no two share a key.
				items = items[:0]
				for i, r := range reqs {
					switch {
					case r.Domain == "probe" && len(r.Descriptors) == 1:
						r = req("probe", kv("near", fmt.Sprint("solo", i)))
					case r.Domain == "algo" && len(r.Descriptors) == 2:
						r = req("algo", kv("tb", "b"), kv("fw", "a"))
					}
					items = append(items, engine.BatchItem{Req: r})
				}
			}
			batch.svc.ShouldRateLimitBatch(context.Background(), nil, items)
			for i, it := range items {
				want := outcome(one.svc.ShouldRateLimit(context.Background(), it.Req))
				if got := outcome(it.Resp, it.Err); got != want {
					t.Errorf("request %d: batch %q, one by one %q", i, got, want)
				}
			}
			if got, want := statsOf(batch.stats), statsOf(one.stats); got != want {
				t.Errorf("stats differ:\nbatch:\n%s\none by one:\n%s", got, want)
			}
			if !stop && batch.counter.calls != 1 {
				t.Errorf("%d counter calls for the batch, want 1", batch.counter.calls)
			}
		})
	}
}

// TestBatchBackendError: a counter failure fails the requests that had
// something to count, and only those; their own errors stay theirs.
func TestBatchBackendError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	f.counter.err = errors.New("connection refused")
	items := []engine.BatchItem{
		{Req: req("probe", kv("k", "two"))},
		{Req: req("probe", kv("free", "x"), kv("zzz", "y"))},
		{Req: req("", kv("k", "two"))},
		{Req: req("probe", kv("near", "a"), kv("free", "x"))},
	}
	f.svc.ShouldRateLimitBatch(context.Background(), nil, items)
	for _, i := range []int{0, 3} {
		if !errors.Is(items[i].Err, engine.ErrBackend) || !strings.Contains(items[i].Err.Error(), "connection refused") {
			t.Errorf("request %d: got %v, want the backend's error", i, items[i].Err)
		}
	}
	if got := outcome(items[1].Resp, items[1].Err); got != "OK | OK rem=4294967295 | OK" {
		t.Errorf("request 1: %s", got)
	}
	if !errors.Is(items[2].Err, engine.ErrInvalidRequest) {
		t.Errorf("request 2: got %v, want its own invalid request", items[2].Err)
	}
	if got := f.stats.CounterValue("ratelimit.service.call.should_rate_limit.redis_error"); got != 2 {
		t.Errorf("redis_error = %d, want 2 (one per failed request)", got)
	}
	if got := f.stats.CounterValue("ratelimit.service.call.should_rate_limit.service_error"); got != 1 {
		t.Errorf("service_error = %d, want 1", got)
	}
}

// closeRecorder is a batch that records its closes and, at the first, how
// many counter calls had carried it (or a part of it) until then.
type closeRecorder struct {
	counter        *backendCounter
	closes         int
	callsAtClosing int
}

func (b *closeRecorder) Close() {
	b.counter.mu.Lock()
	defer b.counter.mu.Unlock()
	if b.closes == 0 {
		b.callsAtClosing = b.counter.batchCalls
	}
	b.closes++
}

// TestBatchClosedOnceSent: the batch is closed exactly once, and only
// once every request with something to count has sent its first
// operations: in stop-increment mode, where each request reads before it
// counts on a goroutine of its own, one request's read must not end the
// hold for the others.
func TestBatchClosedOnceSent(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", stop), func(t *testing.T) {
			f := newFixture(t, func(o *engine.Options) { o.StopIncrementOnLimit = stop }, "probe.yaml")
			items := []engine.BatchItem{
				{Req: req("probe", kv("near", "a"))},
				{Req: req("", kv("k", "two"))}, // its own error: nothing sent
				{Req: req("probe", kv("near", "b"))},
				{Req: req("probe", kv("near", "c"))},
			}
			b := &closeRecorder{counter: f.counter}
			f.svc.ShouldRateLimitBatch(context.Background(), b, items)
			want := 1 // one call for all
			if stop {
				want = 3 // each request's reads
			}
			if b.closes == 0 {
				t.Fatal("the batch was not closed")
			}
			if b.callsAtClosing != want {
				t.Errorf("closed after %d calls carrying it, want %d", b.callsAtClosing, want)
			}
			if f.counter.batchCalls != want {
				t.Errorf("%d calls carried the batch, want %d", f.counter.batchCalls, want)
			}
		})
	}
}

// TestBatchClosedWithNothingToSend: a batch whose requests all fail
// before counting is closed all the same.
func TestBatchClosedWithNothingToSend(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		f := newFixture(t, func(o *engine.Options) { o.StopIncrementOnLimit = stop }, "probe.yaml")
		b := &closeRecorder{counter: f.counter}
		f.svc.ShouldRateLimitBatch(context.Background(), b, []engine.BatchItem{{Req: req("")}})
		if b.closes == 0 {
			t.Errorf("stop=%v: the batch was not closed", stop)
		}
		b = &closeRecorder{counter: f.counter}
		f.svc.ShouldRateLimitBatch(context.Background(), b, nil)
		if b.closes == 0 {
			t.Errorf("stop=%v: an empty batch was not closed", stop)
		}
	}
}
