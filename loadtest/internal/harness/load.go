package harness

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// LoadConfig bounds a closed loop of callers, each making one call at a
// time: the loop ends at Duration, at MaxCallsPerCaller, or when its
// context ends, whichever comes first.
type LoadConfig struct {
	Callers           int
	Duration          time.Duration
	MaxCallsPerCaller int
	// Pause is a caller's wait between two calls (0: back to back).
	Pause time.Duration
}

// Validate reports the first setting that cannot work.
func (c LoadConfig) Validate() error {
	switch {
	case c.Callers < 1:
		return fmt.Errorf("harness: Callers must be at least 1, got %d", c.Callers)
	case c.Duration <= 0:
		return errors.New("harness: Duration must be positive")
	case c.MaxCallsPerCaller < 1:
		return fmt.Errorf("harness: MaxCallsPerCaller must be at least 1, got %d", c.MaxCallsPerCaller)
	case c.Pause < 0:
		return errors.New("harness: Pause is negative")
	}
	return nil
}

// Call is one observed call.
type Call struct {
	Start   time.Time
	Latency time.Duration
	// Code is codes.OK for an answer; otherwise the gRPC status code of the
	// error (codes.Unknown for an error that carries none).
	Code codes.Code
	// Over is an OVER_LIMIT answer.
	Over bool
}

// CallFunc makes one call for caller number caller; over reports an
// OVER_LIMIT answer. It bounds its own wait (a deadline on ctx).
type CallFunc func(ctx context.Context, caller int) (over bool, err error)

// Sink receives every call from the caller's own goroutine; calls of one
// caller arrive in order, calls of different callers concurrently.
type Sink func(caller int, c Call, err error)

// RunLoad runs the loop and returns once every caller has its last answer.
// The context cancels the loop early; a call in flight still finishes (each
// CallFunc bounds itself), so no waiter is left behind.
func RunLoad(ctx context.Context, cfg LoadConfig, call CallFunc, sink Sink) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	deadline := time.Now().Add(cfg.Duration)
	var wg sync.WaitGroup
	for i := range cfg.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < cfg.MaxCallsPerCaller && ctx.Err() == nil && time.Now().Before(deadline); n++ {
				start := time.Now()
				over, err := call(context.WithoutCancel(ctx), i)
				c := Call{Start: start, Latency: time.Since(start), Code: codes.OK, Over: over}
				if err != nil {
					c.Code, c.Over = status.Code(err), false
				}
				sink(i, c, err)
				if cfg.Pause > 0 {
					t := time.NewTimer(cfg.Pause)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// Recorder keeps every call, one slice per caller so recording needs no
// lock, and the first error message of each code.
type Recorder struct {
	per [][]Call

	mu    sync.Mutex
	first map[codes.Code]string
}

// NewRecorder records for n callers.
func NewRecorder(n int) *Recorder {
	return &Recorder{per: make([][]Call, n), first: map[codes.Code]string{}}
}

// Record is a Sink.
func (r *Recorder) Record(caller int, c Call, err error) {
	r.per[caller] = append(r.per[caller], c)
	if err != nil {
		r.mu.Lock()
		if _, seen := r.first[c.Code]; !seen {
			r.first[c.Code] = err.Error()
		}
		r.mu.Unlock()
	}
}

// Calls returns every call ordered by start time. Call it after RunLoad.
func (r *Recorder) Calls() []Call {
	var all []Call
	for _, p := range r.per {
		all = append(all, p...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Start.Before(all[j].Start) })
	return all
}

// FirstErrors are the first error message seen for each code.
func (r *Recorder) FirstErrors() map[codes.Code]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[codes.Code]string, len(r.first))
	for k, v := range r.first {
		out[k] = v
	}
	return out
}
