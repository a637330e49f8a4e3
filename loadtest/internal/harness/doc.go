// Package harness is what the load, fault and soak programs under loadtest/
// share beyond internal/testenv (which starts bin/sluice and Redis on
// loopback ports, reads a process's RSS and CPU, and holds the one
// percentile definition): bounded closed-loop callers that record every
// call, a Go server's goroutine count, the small pieces of arithmetic the
// programs judge their promises with (latency summaries, the growth rule),
// and the start and verdict steps of a fault scenario.
//
// It is a library for programs, not for the service: nothing here reads the
// environment, and every loop it runs is bounded by a count and a duration.
package harness
