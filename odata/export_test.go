package odata

import (
	"time"

	"github.com/sluicehq/sluice/engine"
)

// LocalLimiterService exposes the engine behind a LocalLimiter, so a test
// can serve the same rule over gRPC as a remote rate limit service.
func LocalLimiterService(l *LocalLimiter) *engine.Service { return l.svc }

// SetAccessLogClock replaces the clock of a server's access-log budget, so
// a test can hold time still during a flood and then move it.
func SetAccessLogClock(s *Server, now func() time.Time) {
	s.access.mu.Lock()
	s.access.now, s.access.last = now, now()
	s.access.mu.Unlock()
}

// Waiting is how many requests wait for their key's turn, in all and in
// the longest queue of one key.
func Waiting(s *Server) (total, longest int) { return s.turns.queued() }

// TopKeys is the costliest-key summary of a server with metrics.
func TopKeys(s *Server, n int) []TopKey { return s.metrics.TopKeys(n) }

// SetFailTableSize bounds the networks a server's failed-check throttle
// tracks (maxTracked in production), so that a test overflows the table
// with a flood of a thousand requests rather than of seventy thousand.
func SetFailTableSize(s *Server, n int) {
	s.keyFails.mu.Lock()
	s.keyFails.max = n
	s.keyFails.mu.Unlock()
}
