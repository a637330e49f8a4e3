// Command bench is sluice's side-by-side benchmark harness (make bench).
//
// It starts each system under test as its own process on loopback ports —
// sluice with the memory backend, sluice with a real Redis, a no-op RLS server
// (the floor of gRPC cost on this machine), and optionally a peer rate limit
// service — drives the gRPC API with a closed-loop generator, and reports
// every figure next to a baseline measured in the same run: decisions/s,
// latency percentiles, CPU per 1,000 decisions (from /proc), server
// allocations per decision (from the debug port's memstats) and Redis
// commands and round trips per decision (INFO). Every run is bounded in time.
//
// The systems run side by side from the start and take turns on each
// workload, the no-op first and the others in an order that rotates every
// round, for -rounds rounds; a row is the median of its rounds, so a row
// and its baseline are measured seconds apart and one unlucky run does not
// make the table. With -compare, an A/B table divides sluice's figures by
// the other binary's round by round and takes the median of those ratios.
//
// Processes are started, awaited and measured through internal/testenv, as
// the load-test scenarios do; latency percentiles are testenv.Percentile
// (nearest rank). bench/odatabench is the OData measurement it runs.
//
// The generator is light on purpose, since it shares the machine with what it
// measures. By default (-driver h2) it calls as a proxy's worker thread does:
// one event loop per HTTP/2 connection, the requests' bytes built before the
// run, no goroutine woken per call, so its CPU per call stays low and does not
// grow with the server's latency. -driver grpc drives through grpc-go's
// client instead, as a cross-check (and as ../shared/tools/rlload does).
// -load drives one already running service, for profiles and traces.
//
// -rlqs adds the Rate Limit Quota Service: a fleet of raw RLQS streams (no
// per-request simulation, so the driver stays light) reports many buckets
// every second to one sluice, and the server's CPU per 1,000 bucket
// reports and its RSS are read from /proc.
package main
