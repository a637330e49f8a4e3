package odata

import "github.com/sluicehq/sluice/engine"

// LocalLimiterService exposes the engine behind a LocalLimiter, so a test
// can serve the same rule over gRPC as a remote rate limit service.
func LocalLimiterService(l *LocalLimiter) *engine.Service { return l.svc }
