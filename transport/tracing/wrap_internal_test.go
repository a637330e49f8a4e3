package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/engine"
)

type failing struct{ err error }

func (f failing) Increment(context.Context, []engine.Increment) error      { return f.err }
func (f failing) IncrementBatch(context.Context, []engine.Increment) error { return f.err }
func (f failing) Close() error                                             { return nil }
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
			return tr.Counter(failing{err}, "redis").Increment(context.Background(), nil)
		},
		SpanBatch: func(err error) error {
			return tr.Backend(failing{err}, "redis").IncrementBatch(context.Background(), nil)
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
