package odata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RemoteLimiterOptions configure a limiter that asks a rate limit service
// (sluice's own, or envoyproxy/ratelimit) over gRPC RLS v3.
type RemoteLimiterOptions struct {
	// Target is a gRPC target such as "127.0.0.1:8081".
	Target string
	// Timeout bounds one decision.
	Timeout time.Duration
	// DialOptions replace the default (plaintext) transport options.
	DialOptions []grpc.DialOption
}

// Validate reports a configuration that cannot work.
func (o RemoteLimiterOptions) Validate() error {
	switch {
	case o.Target == "":
		return errors.New("odata: remote rate limiter needs a target")
	case o.Timeout <= 0:
		return errors.New("odata: remote rate limiter timeout must be positive")
	}
	return nil
}

// RemoteLimiter sends ShouldRateLimit(domain "odata", [api_key=<caller>]) to
// a rate limit service. The service's configuration holds the rule.
type RemoteLimiter struct {
	conn    *grpc.ClientConn
	client  rlsv3.RateLimitServiceClient
	timeout time.Duration
}

// NewRemoteLimiter creates the client; it connects lazily, so an
// unreachable service shows as errors from Allow.
func NewRemoteLimiter(o RemoteLimiterOptions) (*RemoteLimiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := o.DialOptions
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(o.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("odata: rate limit service %s: %w", o.Target, err)
	}
	return &RemoteLimiter{conn: conn, client: rlsv3.NewRateLimitServiceClient(conn), timeout: o.Timeout}, nil
}

// Allow asks the service about one request of key.
func (r *RemoteLimiter) Allow(ctx context.Context, key string) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: RateLimitDomain,
		Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: RateLimitKey, Value: key}},
		}},
		HitsAddend: 1,
	})
	if err != nil {
		return false, 0, fmt.Errorf("odata: rate limit service: %w", err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		return true, 0, nil
	}
	var wait time.Duration
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			if d := st.GetDurationUntilReset().AsDuration(); d > wait {
				wait = d
			}
		}
	}
	return false, wait, nil
}

// Close closes the connection.
func (r *RemoteLimiter) Close() error { return r.conn.Close() }

// FallbackLimiter asks a primary limiter (a remote rate limit service) and,
// while it fails, a fallback (the in-process limiter), so the per-key limit
// never turns off silently when the service is down. It logs once when the
// primary starts failing and once when it answers again, not per request.
type FallbackLimiter struct {
	primary, fallback RateLimiter
	log               *slog.Logger
	down              atomic.Bool
}

// NewFallbackLimiter wraps primary; log may be nil.
func NewFallbackLimiter(primary, fallback RateLimiter, log *slog.Logger) *FallbackLimiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &FallbackLimiter{primary: primary, fallback: fallback, log: log}
}

// Allow asks the primary; on its error, the fallback decides.
func (f *FallbackLimiter) Allow(ctx context.Context, key string) (bool, time.Duration, error) {
	ok, retry, err := f.primary.Allow(ctx, key)
	if err == nil {
		if f.down.CompareAndSwap(true, false) {
			f.log.Info("odata: the rate limit service answers again; its limit applies")
		}
		return ok, retry, nil
	}
	if ctx.Err() != nil {
		return false, 0, err // the request itself ended; nothing to fall back for
	}
	if f.down.CompareAndSwap(false, true) {
		f.log.Warn("odata: the rate limit service failed; the in-process limiter applies the per-key limit until it answers again", "err", err)
	}
	return f.fallback.Allow(ctx, key)
}

// Degraded reports whether the last decision came from the fallback.
func (f *FallbackLimiter) Degraded() bool { return f.down.Load() }
