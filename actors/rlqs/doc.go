// Package rlqs serves the Rate Limit Quota Service (Envoy's
// rate_limit_quota filter) on one sluice replica: it divides each rule's
// limit among the Envoys that report the rule's buckets, and pays for
// every share on the rule's shared counters before it is sent, so RLS
// callers, RLQS Envoys and several replicas share one limit.
//
// How a report flows:
//
//  1. A stream's owner (the transport) calls Stream.Report with each
//     usage message. Under the service's lock, each bucket finds its hub
//     (one per domain and BucketId on this replica, holding the bucket's
//     rule); the Envoy's reporter in it takes the report's demand
//     (engine/rlqs.Rate) and the rule's statistics count it as RLS
//     decisions count requests. The hub is marked dirty.
//  2. Every Tick, one goroutine (the service's loop, its only one) serves
//     the hubs that are dirty or have an assignment to renew: it divides
//     the rule's limit max-min fair over the live reporters' claims
//     (engine/rlqs.Divide, Assign, Keep), and computes, for each window
//     from the current one to the end of the longest TTL, the most the
//     Envoys may admit in it under everything they were sent (need). What
//     the hub holds on a window's counter is topped up to that need with
//     one OpReserve per window, all hubs' in one Counter.Apply, made
//     without the lock.
//  3. Under the lock again, each hub books what the store granted (the
//     counts at or below the limit; an excess is given back) and fits its
//     changes in what it holds (hub.fit): while some of its cuts are not
//     yet known applied, raises go out by the part that fits and the hub
//     asks again soon; otherwise the limit is scaled to what it holds.
//     What still does not fit keeps what it has (paid for until its TTL)
//     or, about to expire, is DENY_ALL. Only then are the assignments
//     committed and pushed to the streams' Sinks, in one message per
//     stream; what the hub holds beyond the need (and beyond what its
//     claims call for) is given back (OpRelease).
//
// Why the fleet never goes over (fixed and sliding windows, each window's
// counter): an Envoy enforcing token buckets admits in a window at most
// the tokens of every bucket it may hold in it plus the fastest rate over
// the time they cover (addNeed). Every assignment sent was first covered
// on every window its TTL reaches, by counts the counter granted at or
// below the limit, and RLS decisions (exact or leased) only admit counts
// at or below the limit of the same counter. A replaced assignment is
// counted until the Envoy reports on the same stream 2×Delivery after the
// replacement was sent (it has it by then); when a stream ends, what its
// Envoy was sent stays counted, as a ghost, until its TTL ends (Envoy
// keeps enforcing it). A reload keeps the paid-for assignments counted.
//
// Token-bucket rules are divided the same way (rate and burst shared
// out) but counted from the reports: what Envoys admitted is taken from
// the shared bucket afterwards, so RLS callers see it, without the
// guarantee above across RLS callers and RLQS Envoys.
package rlqs
