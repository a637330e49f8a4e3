// Package harness is what the load, fault and soak programs under loadtest/
// share: starting bin/sluice (and, through internal/testenv, Redis) on
// loopback ports, bounded closed-loop callers that record every call, reading
// a process's RSS and a Go server's goroutine count, and the small pieces of
// arithmetic the programs judge their promises with (percentiles, the growth
// rule).
//
// It is a library for programs, not for the service: nothing here reads the
// environment, and every loop it runs is bounded by a count and a duration.
package harness
