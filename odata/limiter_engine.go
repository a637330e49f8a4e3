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
	// RequestsPerSecond per caller, on average; 2 as the real service documents.
	RequestsPerSecond uint32
	// Burst is how many requests a caller may make at once (a token bucket's
	// capacity): the official clients' pacing has jitter and restarts on each
	// call, so a caller at RequestsPerSecond on average still sends a few
	// requests close together now and then. 0 means DefaultBurst.
	Burst uint32
	// Clock is the time source (tests inject one); nil is time.Now.
	Clock func() time.Time
}

// DefaultBurst is the per-key burst: with 2 requests/s, 2 s of tolerance
// for clients pacing with jitter (the emulations in clients_pacing_test.go
// need 4: with 3 the R client's count-then-page is refused now and then).
const DefaultBurst = 4

// DefaultLocalLimiterOptions allow 2 requests per second per caller, burst 4.
func DefaultLocalLimiterOptions() LocalLimiterOptions {
	return LocalLimiterOptions{RequestsPerSecond: 2, Burst: DefaultBurst}
}

// Validate reports a configuration that cannot work.
func (o LocalLimiterOptions) Validate() error {
	if o.RequestsPerSecond == 0 {
		return errors.New("odata: RequestsPerSecond must be at least 1")
	}
	return nil
}

// RateLimitConfigYAML is the per-key rule as a rate limit configuration
// file: a token bucket of RequestsPerSecond per second holding Burst. The
// in-process limiter loads exactly this; a remote rate limit service (a
// sluice with -rate-limit-service) must hold the same file.
func RateLimitConfigYAML(o LocalLimiterOptions) string {
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	return fmt.Sprintf(`domain: %s
descriptors:
  - key: %s
    rate_limit: {unit: second, requests_per_unit: %d, algorithm: token_bucket, burst: %d}
`, RateLimitDomain, RateLimitKey, o.RequestsPerSecond, o.Burst)
}

// LocalLimiter applies the per-key rule through the rate limit engine
// with its in-memory counters, in this process.
type LocalLimiter struct {
	svc     *engine.Service
	backend *memory.Backend
}

// NewLocalLimiter builds the engine with one rule, RateLimitConfigYAML(o).
func NewLocalLimiter(o LocalLimiterOptions) (*LocalLimiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	backend := memory.New(o.Clock)
	eo := engine.DefaultOptions()
	eo.Counter = engine.DirectCounter{Backend: backend} // one request is one key: nothing to batch
	eo.Clock = o.Clock
	svc, err := engine.NewService(eo)
	if err != nil {
		return nil, fmt.Errorf("odata: rate limit engine: %w", err)
	}
	cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "odata", YAML: []byte(RateLimitConfigYAML(o))}}, false)
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
