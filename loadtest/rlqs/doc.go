// Command rlqs plays a fleet of Envoys running the rate_limit_quota filter
// (internal/rlqssim) against one or more RLQS servers, prints every
// reporting interval what the fleet admitted per bucket and per Envoy, and
// with -limit judges the run of the first bucket:
//
//  1. once the demand has been steady for -settle intervals (so from the
//     third interval on), the fleet admits at most -limit per second and at
//     least -min-fleet × min(limit, demand) (950–1,000/s for 1,000/s);
//  2. every Envoy whose demand is at least its max-min fair share (computed
//     here by water-filling, independently of sluice's allocator) admits at
//     least -min-share (0.9) × that share per second;
//  3. after -idle-at, when the heaviest Envoy goes idle, the same holds for
//     the new shares within -settle intervals.
//
// It exits 1 when a promise breaks (BROKEN lines say which), 0 otherwise.
// Faults: -cut and -restart take envoy@time lists ("3@10s,4@12s").
//
//	go run ./loadtest/rlqs -targets 127.0.0.1:8081 -domain example \
//	    -buckets 'user=ann' -limit 1000 -demand 3000 -split 70:1,20:2,10:7
package main
