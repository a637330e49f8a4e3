// Command rlqs runs the quota service's scenarios (internal/rlqssim's
// Scenarios: the fleet of ten Envoys on a 1,000/s rule, a demand
// shift, an Envoy restarted, stream cuts, the whole fleet restarted, a
// reload, two and three replicas with RLS callers and a replica stopped)
// against real sluice replicas it starts (-bin, -backend, -server), with
// a fleet of simulated Envoys on real gRPC streams that behave as Envoy's
// rate_limit_quota filter does (5 s report timer, ALLOW_ALL by default, no
// reuse_last_assignment; or the per-worker client). It prints a summary
// line per scenario and exits 1 when a window was over the limit or an
// assignment lapsed on a healthy stream; use and fairness (at least 0.9
// outside the settling times) are printed, not judged.
//
// -simulate runs the same scenarios in simulated time against the quota
// service in process, in a second each.
//
//	go run ./loadtest/rlqs -bin bin/sluice -backend redis -arrivals even,poisson
package main
