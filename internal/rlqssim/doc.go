// Package rlqssim simulates a fleet of Envoys running the
// envoy.filters.http.rate_limit_quota filter against Rate Limit Quota
// Service servers (envoy.service.rate_limit_quota.v3), so that a server
// can be judged by what the proxies would admit.
//
// Each simulated Envoy has one grpc-go stream to one of Config.Targets,
// opened by its first report and reopened, to the next target, at the
// next report after it breaks (the per-worker client: at its next new
// bucket, never by its timer). Its buckets go through the filter's states
// as Envoy's source implements them (see engine/rlqs's doc.go for the
// protocol facts): no-assignment (Config.NoAssignment), active (the
// assigned blanket rule or token bucket, fill interval and TTL read in
// whole seconds, an equal token bucket kept with its tokens, any other
// replacing it full), expired (Config.Expired for its timeout, then
// no-assignment) and abandoned (erased; the next request subscribes
// again). The first request into a bucket sends its subscription report
// at once; every Config.Interval one message reports all buckets with
// time_elapsed truncated to whole seconds.
//
// Requests arrive every Config.Tick at Config.Demand's rate (fractions
// carried, no randomness) on the wall clock, because the servers under
// test count on the wall clock too. What each Envoy admits is recorded
// per unix second, the windows sluice's per-second limits count in.
//
// The filter's logic (bucket, filter, limiter, accumulator, FairShares,
// judge) takes its time as an argument and has no I/O; envoy.go and
// sim.go add the goroutines and streams. FairShares is written here, not
// taken from engine/rlqs, so that Check does not judge sluice's allocator
// by itself.
package rlqssim
