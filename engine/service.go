package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine/stats"
)

// Options configure a Service. Zero values mean the reference's defaults
// where DefaultOptions documents one.
type Options struct {
	Counter Counter
	Stats   *stats.Store
	// Clock is the time source; tests inject one to cross windows without sleeping.
	Clock func() time.Time
	// Jitter returns a random number in [0, n); the TTL jitter source.
	Jitter func(n int64) int64

	NearLimitRatio       float32       // NEAR_LIMIT_RATIO, default 0.8
	CacheKeyPrefix       string        // CACHE_KEY_PREFIX
	ExpirationJitterMax  time.Duration // EXPIRATION_JITTER_MAX_SECONDS, default 300s
	ShadowMode           bool          // SHADOW_MODE (global)
	QuotaMode            bool          // QUOTA_MODE (global)
	DynamicMetadata      bool          // RESPONSE_DYNAMIC_METADATA
	Headers              HeaderOptions // LIMIT_RESPONSE_HEADERS_ENABLED and names
	StopIncrementOnLimit bool          // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	// Counting is how rules that name none count (SLUICE_COUNTING):
	// CountDefault and CountExact both send every decision to the store.
	// CountLease needs a Counter that answers leased operations (lease).
	Counting     Counting
	LocalCache   OverLimitCache
	KeyValidator KeyValidator
	// Timeout bounds how long a decision waits for the counters.
	Timeout time.Duration
	// BackendErrorStat names the should_rate_limit error counter of a backend
	// failure; "redis_error" as the reference, whatever the backend.
	BackendErrorStat string
}

// DefaultOptions are the reference's defaults.
func DefaultOptions() Options {
	return Options{
		NearLimitRatio:      0.8,
		ExpirationJitterMax: 300 * time.Second,
		Headers: HeaderOptions{
			Limit:     "RateLimit-Limit",
			Remaining: "RateLimit-Remaining",
			Reset:     "RateLimit-Reset",
		},
		Timeout:          time.Second,
		BackendErrorStat: "redis_error",
	}
}

// EnsureDefaults fills the fields whose zero value means "not set" (the
// statistics store, clock, jitter source and error counter name) and returns
// o. Fields whose zero is a valid setting (NEAR_LIMIT_RATIO=0, no jitter)
// take the reference's values from DefaultOptions instead.
func (o *Options) EnsureDefaults() *Options {
	if o.Stats == nil {
		o.Stats = stats.NewStore()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = rand.Int64N
	}
	if o.BackendErrorStat == "" {
		o.BackendErrorStat = "redis_error"
	}
	return o
}

// Validate reports the first setting that cannot work. It checks settings
// only, so the server validates them once, when it reads them; NewService
// also requires a Counter.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(float64(o.NearLimitRatio)):
		return fmt.Errorf("engine: NEAR_LIMIT_RATIO must be between 0 and 1, got %v", o.NearLimitRatio)
	case o.ExpirationJitterMax < 0:
		return fmt.Errorf("engine: EXPIRATION_JITTER_MAX_SECONDS must not be negative, got %v", o.ExpirationJitterMax)
	case o.Timeout <= 0:
		return fmt.Errorf("engine: the backend timeout (SLUICE_BACKEND_TIMEOUT) must be positive, got %v", o.Timeout)
	case o.Headers.Enabled && (o.Headers.Limit == "" || o.Headers.Remaining == "" || o.Headers.Reset == ""):
		return errors.New("engine: response header names must not be empty")
	}
	return nil
}

// Service makes rate limit decisions against the current configuration.
type Service struct {
	o   Options
	cfg atomic.Pointer[Config]

	serviceError     *stats.Counter
	backendError     *stats.Counter
	globalShadowMode *stats.Counter
}

// NewService checks the options and returns a Service with no configuration;
// requests fail with ErrNoConfig until SetConfig.
func NewService(o Options) (*Service, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	if o.Counter == nil {
		return nil, errors.New("engine: a Counter is required")
	}
	return &Service{
		o:                o,
		serviceError:     o.Stats.Counter("ratelimit.service.call.should_rate_limit.service_error"),
		backendError:     o.Stats.Counter("ratelimit.service.call.should_rate_limit." + o.BackendErrorStat),
		globalShadowMode: o.Stats.Counter("ratelimit.service.global_shadow_mode"),
	}, nil
}

// Stats is the store the service counts into.
func (s *Service) Stats() *stats.Store { return s.o.Stats }

// SetConfig swaps in a new configuration (nil unloads it). The statistics
// of rules the new one no longer has are released.
func (s *Service) SetConfig(c *Config) {
	if old := s.cfg.Swap(c); old != nil && old != c {
		old.releaseRemoved(c)
	}
}

// Config is the configuration in use, or nil.
func (s *Service) Config() *Config { return s.cfg.Load() }

// LoadConfig builds a Config that counts into this service's stats store.
func (s *Service) LoadConfig(files []ConfigFile, merge bool) (*Config, error) {
	return LoadConfig(files, ConfigOptions{MergeDomains: merge, Stats: s.o.Stats})
}

// ShouldRateLimit decides one request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *Request) (*Response, error) {
	return s.decideOne(ctx, req, nil)
}

// decideOne decides req; batch, if not nil, is closed once req's first
// counter operations are sent, or when it returns.
func (s *Service) decideOne(ctx context.Context, req *Request, batch Batch) (*Response, error) {
	defer closeBatch(batch)
	cfg, err := s.check(req)
	if err != nil {
		return nil, err
	}
	// A typical request has one to three descriptors: its working state lives
	// on the stack, and its response and counter operations share one allocation.
	var infoBuf [4]limitInfo
	var infos []limitInfo
	if len(req.Descriptors) <= len(infoBuf) {
		infos = infoBuf[:len(req.Descriptors)]
	} else {
		infos = make([]limitInfo, len(req.Descriptors))
	}
	var d *decision
	var ops []CounterOp
	if len(infos) <= len(d.ops) {
		d = new(decision)
		ops = d.ops[:0:len(infos)]
	} else {
		ops = make([]CounterOp, 0, len(infos))
	}
	now := s.o.Clock()
	if ops, err = s.prepare(cfg, req, infos, ops, now); err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := s.count(ctx, infos, ops, now, batch); err != nil {
			s.backendError.Inc()
			return nil, BackendError(err)
		}
	}
	return s.respond(req, infos, d.response(len(infos)), now), nil
}
