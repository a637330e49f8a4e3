// Command soak keeps sluice under steady, mixed load for a long time
// (-duration, default 10 minutes) and fails when its memory or goroutine
// count keeps growing.
//
// The load mixes what a long-running service meets: gRPC calls over shared
// connections and over a connection redialled every 100 calls, HTTP /json
// calls, per-second limits that expire and refill, values that rotate
// through 100,000 keys, and OVER_LIMIT answers. Every -interval (10 s) the
// program records the server's RSS (VmRSS from /proc/<pid>/status) and its
// goroutine count (the first line of /debug/pprof/goroutine?debug=1 on the
// debug port, "goroutine profile: total N").
//
// The growth rule (harness.GrowthRule): the samples are cut in thirds, and
// a series grew when the median of the last third exceeds the median of the
// first third by more than a relative tolerance plus an absolute slack:
//
//	RSS:        last-third median > first-third median × 1.20 + 16 MiB
//	goroutines: last-third median > first-third median × 1.10 + 10
//
// Medians shrug off a single GC spike; the slack absorbs allocator and
// scheduler noise on a small process. A real leak, steady over the run,
// clears both. Fewer than 6 samples (a run under a minute) are reported
// but not judged. Any failed call also fails the soak.
//
//	go run ./loadtest/soak [-duration 10m] [-backend redis|memory] [-csv soak.csv]
package main
