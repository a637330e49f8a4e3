package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/engine"
)

type failing struct{ err error }

func (f failing) Apply(context.Context, []engine.CounterOp, engine.Batch) error { return f.err }
func (f failing) Exec(context.Context, []engine.CounterOp) error                { return f.err }
func (f failing) Close() error                                                  { return nil }
func (f failing) ShouldRateLimitBatch(_ context.Context, b engine.Batch, items []engine.BatchItem) {
	for i := range items {
		items[i].Resp, items[i].Err = f.ShouldRateLimit(context.Background(), items[i].Req)
	}
	if b != nil {
		b.Close()
	}
}
func (f failing) ShouldRateLimit(context.Context, *engine.Request) (*engine.Response, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &engine.Response{OverallCode: engine.CodeOK}, nil
}

// TestWrappersMarkFailedSpans: each wrapper returns its callee's error and
// marks its span failed with it; a call that succeeds leaves the status unset.
func TestWrappersMarkFailedSpans(t *testing.T) {
	s := DefaultSettings()
	s.SamplingRate = 1
	tr, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.tp.Shutdown(context.Background())
	rec := tracetest.NewSpanRecorder()
	tr.tp.RegisterSpanProcessor(rec)
	boom := errors.New("boom")
	calls := map[string]func(error) error{
		SpanDecision: func(err error) error {
			_, e := tr.Decider(failing{err}).ShouldRateLimit(context.Background(), &engine.Request{Domain: "d"})
			return e
		},
		CounterSpanName("redis"): func(err error) error {
			return tr.Counter(failing{err}, "redis").Apply(context.Background(), nil, nil)
		},
		SpanBatch: func(err error) error {
			return tr.Backend(failing{err}, "redis").Exec(context.Background(), nil)
		},
	}
	for name, call := range calls {
		for _, want := range []error{nil, boom} {
			if got := call(want); got != want {
				t.Fatalf("%s: returned %v, want %v", name, got, want)
			}
			ended := rec.Ended()
			span := ended[len(ended)-1]
			if span.Name() != name {
				t.Fatalf("span %q, want %q", span.Name(), name)
			}
			wantCode := codes.Unset
			if want != nil {
				wantCode = codes.Error
			}
			if st := span.Status(); st.Code != wantCode || (want != nil && st.Description != want.Error()) {
				t.Errorf("%s with error %v: status %+v", name, want, st)
			}
		}
	}
}

type closeCount struct{ n int }

func (c *closeCount) Close() { c.n++ }

// TestDeciderBatchPassesOn: the traced decider decides a batch as one,
// through the wrapped decider's batch call (which closes the batch), and
// marks its span failed when a request failed.
func TestDeciderBatchPassesOn(t *testing.T) {
	s := DefaultSettings()
	s.SamplingRate = 1
	tr, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.tp.Shutdown(context.Background())
	rec := tracetest.NewSpanRecorder()
	tr.tp.RegisterSpanProcessor(rec)
	for _, fail := range []error{nil, errors.New("boom")} {
		b := &closeCount{}
		items := []engine.BatchItem{{Req: &engine.Request{Domain: "d"}}, {Req: &engine.Request{Domain: "d"}}}
		tr.Decider(failing{fail}).ShouldRateLimitBatch(context.Background(), b, items)
		if b.n != 1 {
			t.Errorf("error %v: batch closed %d times, want once", fail, b.n)
		}
		for i, it := range items {
			if it.Err != fail || (fail == nil && it.Resp == nil) {
				t.Errorf("error %v: item %d: %+v", fail, i, it)
			}
		}
		ended := rec.Ended()
		span := ended[len(ended)-1]
		want := codes.Unset
		if fail != nil {
			want = codes.Error
		}
		if span.Name() != SpanDecision || span.Status().Code != want {
			t.Errorf("error %v: span %q status %+v", fail, span.Name(), span.Status())
		}
	}
}

type bounded struct {
	failing
	d time.Duration
}

func (b bounded) WaitBound() time.Duration { return b.d }

// TestWrappersKeepOptionalInterfaces lists the optional interfaces a
// wrapped value may implement, and checks each wrapper says what its
// callee says: no more, no less.
func TestWrappersKeepOptionalInterfaces(t *testing.T) {
	tr, err := New(DefaultSettings(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.tp.Shutdown(context.Background())
	// engine.WaitBounder, on a Counter.
	if wb, ok := tr.Counter(bounded{d: 3 * time.Second}, "redis").(engine.WaitBounder); !ok || wb.WaitBound() != 3*time.Second {
		t.Errorf("a traced WaitBounder counter: WaitBounder %v, bound %v; want true, 3s", ok, wb)
	}
	if _, ok := tr.Counter(failing{}, "redis").(engine.WaitBounder); ok {
		t.Error("a traced counter without a bound claims one")
	}
	// Inline, on a Backend.
	type inliner interface{ Inline() bool }
	if ib, ok := tr.Backend(inline{}, "memory").(inliner); !ok || !ib.Inline() {
		t.Error("a traced inline backend is not inline")
	}
	if ib, ok := tr.Backend(failing{}, "redis").(inliner); ok && ib.Inline() {
		t.Error("a traced backend that is not inline says it is")
	}
}

type inline struct{ failing }

func (inline) Inline() bool { return true }
