package odata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// Domain and descriptor key of the OData API's rate limit rule, in process
// and on a remote rate limit service (whose configuration must hold the
// same rule: domain "odata", descriptor api_key).
const (
	RateLimitDomain = "odata"
	RateLimitKey    = "api_key"
)

// LocalLimiterOptions configure the in-process rate limiter.
type LocalLimiterOptions struct {
	// RequestsPerSecond per caller; 2 as the real service documents.
	RequestsPerSecond uint32
	// Clock is the time source (tests inject one); nil is time.Now.
	Clock func() time.Time
}

// DefaultLocalLimiterOptions allow 2 requests per second per caller.
func DefaultLocalLimiterOptions() LocalLimiterOptions {
	return LocalLimiterOptions{RequestsPerSecond: 2}
}

// Validate reports a configuration that cannot work.
func (o LocalLimiterOptions) Validate() error {
	if o.RequestsPerSecond == 0 {
		return errors.New("odata: RequestsPerSecond must be at least 1")
	}
	return nil
}

// LocalLimiter applies the per-second rule through the rate limit engine
// with its in-memory counters, in this process.
type LocalLimiter struct {
	svc     *engine.Service
	backend *memory.Backend
}

// backendCounter hands each decision's increments straight to the memory
// backend; one request is one key, so there is nothing to batch.
type backendCounter struct{ b engine.Backend }

func (c backendCounter) Increment(ctx context.Context, ops []engine.Increment) error {
	return c.b.IncrementBatch(ctx, ops)
}

// NewLocalLimiter builds the engine with one rule: domain odata, descriptor
// api_key, RequestsPerSecond per second.
func NewLocalLimiter(o LocalLimiterOptions) (*LocalLimiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	backend := memory.New(o.Clock)
	eo := engine.DefaultOptions()
	eo.Counter = backendCounter{backend}
	eo.Clock = o.Clock
	svc, err := engine.NewService(eo)
	if err != nil {
		return nil, fmt.Errorf("odata: rate limit engine: %w", err)
	}
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "odata", Domain: &engine.DomainConfig{
		Domain: RateLimitDomain,
		Descriptors: []engine.DescriptorConfig{{
			Key:       RateLimitKey,
			RateLimit: &engine.RateLimitConfig{RequestsPerUnit: o.RequestsPerSecond, Unit: "second"},
		}},
	}}}, engine.ConfigOptions{})
	if err != nil {
		return nil, fmt.Errorf("odata: rate limit rule: %w", err)
	}
	svc.SetConfig(cfg)
	return &LocalLimiter{svc: svc, backend: backend}, nil
}

// Allow counts one request of key and says whether it is within the rule.
func (l *LocalLimiter) Allow(ctx context.Context, key string) (bool, time.Duration, error) {
	resp, err := l.svc.ShouldRateLimit(ctx, &engine.Request{
		Domain:      RateLimitDomain,
		Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: RateLimitKey, Value: key}}}},
		HitsAddend:  1,
	})
	if err != nil {
		return false, 0, err
	}
	return decision(resp.OverallCode == engine.CodeOverLimit, resp.Statuses)
}

func decision(over bool, statuses []engine.DescriptorStatus) (bool, time.Duration, error) {
	if !over {
		return true, 0, nil
	}
	var wait time.Duration
	for _, st := range statuses {
		if st.Code == engine.CodeOverLimit && st.DurationUntilReset > wait {
			wait = st.DurationUntilReset
		}
	}
	return false, wait, nil
}

// Close releases the counters.
func (l *LocalLimiter) Close() error { return l.backend.Close() }
