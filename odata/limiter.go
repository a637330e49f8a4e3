package odata

import (
	"context"
	"time"
)

// RateLimiter decides whether a caller (an API key id, or "origin:<origin>"
// for browsers) may make one more request now. When not, retryAfter says
// how long until it may.
type RateLimiter interface {
	Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error)
}
