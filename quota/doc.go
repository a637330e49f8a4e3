// Package quota serves the Rate Limit Quota Service (Envoy's
// rate_limit_quota filter) on one sluice replica: it divides each rule's
// limit among the Envoys that report the rule's buckets, and pays for
// every share on the rule's shared counters before it is sent, so RLS
// callers, RLQS Envoys and several replicas share one limit.
//
// How a report flows (one goroutine owns each shard; no lock is held
// across buckets):
//
//  1. A stream's owner (the transport) calls Stream.Report with each
//     usage message. The report is checked, then split by the xxhash of
//     domain and BucketId into one message per shard (at most maxChunk
//     usages each) queued in the stream's lane of the shard (intake.go):
//     a stream with laneSize messages waiting there waits for room, and
//     its Envoy's HTTP/2 window fills. The shard takes the lanes' messages
//     least recent work first (usages charged, fading), so a stream's
//     small report is not served after every report a flood of other
//     streams queued first; and it takes none while a store call is out
//     and opsHigh operations wait for the next, so that what waits, waits
//     in the lanes rather than in a store call as long as the flood. Small
//     reports (and a light stream's acks and close) are express: taken
//     even then, their buckets served between a backlog's, and their
//     operations sent in a store call of their own beside the flood's
//     (express.go), so that a probe Envoy's new bucket waits for neither
//     the flood's call out nor a place in the next. A large report's
//     young buckets (usage over less than MinElapsed: just made, on the
//     Envoy's no_assignment_behavior until answered) are sent first, and
//     when they are few, they are express too.
//  2. The shard's goroutine (loop) takes the usages: each bucket finds its
//     hub (one per domain and BucketId on this replica), the Envoy's
//     reporter in it takes the report's demand. A bucket beyond the
//     stream's MaxBuckets, the service's MaxReporters or the memory
//     Budget is answered once with the Refused rule for RefusedTTL and
//     not tracked.
//  3. The shard serves the hubs that got news or are due (a renewal, a
//     cleanup): engine/alloc's Planner decides, from a snapshot of the
//     hub, what each Envoy is sent and what the hub must reserve on or
//     give back to the rule's window counters. Assignments are pushed to
//     the streams' Sinks (which never block); the operations of every hub
//     go out as one store call per shard at a time (and one express call),
//     in Counter calls of at most applyChunk operations, its answer coming
//     back as a message (msgResult), when the hubs waiting on it are
//     served again.
//  4. Every second, at most, a shard publishes its hubs' claims on the
//     Board and reads the other replicas' (board.go), so each replica
//     divides the limit max-min fair over every replica's Envoys.
//
// Why the fleet never goes over, as Envoy really runs (its global client
// reports every 5 s, drops an assignment at its TTL and then applies its
// no_assignment_behavior, ALLOW_ALL by default, with no
// reuse_last_assignment): see engine/alloc's doc. In short, every bucket
// an Envoy may enforce is a counted segment until it expires or is known
// replaced, every segment was paid for on every window it reaches before
// it was sent, and renewals go out well before the TTL, which outlives a
// report period, a delivery and a margin, so that a healthy stream never
// lapses to ALLOW_ALL. A closed stream's segments stay counted, as ghosts,
// until they end; Drain gives back what a stopping replica holds beyond
// what its Envoys may spend until they reach another replica.
package quota
