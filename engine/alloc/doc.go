// Package alloc is the arithmetic of sluice's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3, RLQS): which rule a bucket falls
// under, how a rule's limit is divided among the Envoys that report the
// bucket, and what each Envoy is told to enforce. It has no I/O, no
// goroutines and no protobuf: the stream's owner feeds it reports and
// turns its Strategy values into BucketActions.
//
// # The protocol, as the allocation relies on it
//
// These are facts of the protos in go-control-plane (envoy v1.40.0) and of
// the source of Envoy's filter (envoy.filters.http.rate_limit_quota, its
// global client), not choices:
//
//   - One bidirectional stream, StreamRateLimitQuotas, per Envoy (the
//     filter's global client; one per filter config). Each message is a
//     RateLimitQuotaUsageReports: the domain (required in the first
//     message; Envoy sets it in every one) and a list of per-bucket usages,
//     each a BucketId (a map of at least one non-empty key to a non-empty
//     value; key order does not matter), time_elapsed since that bucket's
//     previous report, num_requests_allowed and num_requests_denied.
//   - The first report of a BucketId subscribes the Envoy to it; Envoy
//     sends it at the first request matched into the bucket (so it counts
//     one request over an elapsed time of about zero). Afterwards Envoy
//     reports every bucket it tracks each reporting_interval (more than
//     100 ms by validation), all in one message, counters reset at each.
//     Envoy fills time_elapsed in whole seconds (truncated): a report may
//     say 0 s, and 1 s for 1.9 s. Rate therefore takes the longer of the
//     reported time and the server's own observation.
//   - The server answers whenever it likes with RateLimitQuotaResponse, a
//     list of BucketActions applied in order: a QuotaAssignmentAction (a
//     RateLimitStrategy and an assignment_time_to_live) or an
//     AbandonAction. An assignment to a bucket the Envoy does not track is
//     logged and ignored by Envoy.
//   - Envoy enforces a token_bucket strategy with a continuously refilled
//     bucket of rate tokens_per_fill / fill_interval that starts full
//     (max_tokens). It reads fill_interval in whole seconds (a 500 ms
//     interval becomes 0 s and an unbounded rate), so fill intervals here
//     are whole seconds. requests_per_time_unit is not supported by Envoy; the
//     blanket_rule ALLOW_ALL / DENY_ALL is.
//   - A new assignment whose token bucket equals the active one (Envoy
//     compares max_tokens, tokens_per_fill and the nanos of fill_interval)
//     keeps the bucket and its tokens and only extends the TTL; any other
//     replaces the bucket, full again. Every replacement therefore hands
//     the Envoy max_tokens at once (see Keep).
//   - Envoy reads assignment_time_to_live in whole seconds, and an unset
//     TTL as 0: the assignment expires at once. TTLs here are whole
//     seconds, at least one. When it expires, Envoy applies the bucket's
//     expired_assignment_behavior (a fallback strategy, or reuse of the
//     last assignment, for expired_assignment_behavior_timeout) and then
//     its no_assignment_behavior (default: allow all); without an expired
//     behaviour Envoy's code goes straight to the no-assignment state (the
//     proto says the bucket is abandoned).
//   - abandon_action erases the bucket in Envoy: it stops reporting it, and
//     the next request matched into it subscribes anew (no-assignment
//     state until an assignment arrives). The server sends it for buckets
//     it no longer tracks: idle ones, and those whose rule a reload
//     removed.
//   - When the stream breaks Envoy keeps enforcing its assignments until
//     their TTL, and reopens the stream at its next report, which carries
//     every bucket it tracks: the reconnect is a resubscription. What its
//     buckets counted while no stream could be opened is dropped.
//
// # Choices made here (each with its reason at its definition)
//
//   - Demand is (allowed + denied) / elapsed: what the Envoy's clients
//     asked for, not what they were let through (Rate).
//   - A rule's limit, as a rate per second, is divided max-min fair over
//     the reporters' claims (their demand, at least a floor, or the equal
//     share while unknown) by water-filling; what the claims leave is
//     spread equally (Divide).
//   - A share becomes a token bucket of fill interval 1 s (or the whole
//     seconds one token takes, for shares under 1/s), tokens_per_fill
//     rounded down, and max_tokens Options.Burst of the share or the
//     share's part of a token-bucket rule's burst (Assign).
//   - A bucket is matched against the domain's rules as the descriptor of
//     its entries in a configured key order, then by key name (Entries);
//     unlimited rules and shadow-mode rules are ALLOW_ALL, a limit of zero
//     is DENY_ALL, and a bucket that matches nothing gets Options.NoMatch
//     (PlanFor).
package alloc
