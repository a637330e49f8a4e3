// Package lease answers rate limit decisions from hits reserved ahead from
// the shared counters, so that a replica pays no store round trip per
// decision and the fleet still never goes over a limit.
//
// How a decision flows (Counter.Apply, for the operations the engine marked
// with engine.LeaseTerms; the rest go to the next Counter as they are; a
// sliding window's read of the previous window is found by its pair label,
// engine.SlidingRead):
//
//  1. The operation's key finds its state (one per cache key, under one
//     of a few striped locks). A window's state holds spans of counts it
//     owns: a reservation that added n to the shared counter and got back
//     C owns the counts C-n+1 … C that are within the limit. A bucket's
//     state holds tokens: a take of n tokens from a bucket whose theoretical
//     arrival time (TAT) was found at base gets the tokens whose own times
//     are base+I … base+n·I.
//
//  2. If the state owns enough, the decision takes them and is answered at
//     once with the count (or TAT) an exact decision would have seen for
//     those hits; the engine judges it as it judges the store's answers.
//     If a reservation came back short (the window's counter reached its
//     limit, or the bucket was empty), the key is over (a fixed window's
//     for good: its key names one window; a bucket until it has a token
//     again), answered without a call. A sliding window's over decisions
//     add their hits to the counter as exact counting does (they weigh on
//     the next window): into what the short reservation added and did not
//     grant first, the rest carried by the key's next reservation or sent
//     by the sweeper (at once near the window's end), one write for many;
//     and for the rest of the window the key reserves only the hits of
//     decisions waiting, so the counter holds no count without a decision.
//     A reservation that comes back after its window ended still answers
//     the decisions that waited for it, from the counter value it
//     returned, as exact counting answers from its INCRBY: a decision in a
//     window's last round trip waits one round trip, and nothing is
//     reserved ahead for a window that ends before the reservation could
//     return.
//
//  3. A window's decision that no reservation would serve within one
//     round trip goes direct: its key has no state yet (a cold key), or
//     the reservation in flight has no room left for it (and the key is
//     not near its limit). It is sent with the batch's exact operations,
//     in the caller's call, as an OpReserve of its own hits — the lease's
//     atomic reservation, never OpAdd (memcache's add reads, then
//     increments later) — answered from the count returned, as exact
//     counting answers from its INCRBY, and that count is filed into the
//     key's state (made then for a cold key): a cold key's first
//     decisions cost what they cost in exact mode, one write each, and
//     hold nothing, and no decision waits for a reservation started
//     before it and then for another (two round trips at a window's
//     start, where a new key's decisions crowd).
//
//     Otherwise the decision waits for the state's one reservation in
//     flight (starting it if none is), sized by the key's observed rate on
//     this replica (a share of the limit at most) plus the hits waiting,
//     all capped by a share of the headroom left; what it takes beyond
//     the hits waiting serves the decisions that arrive while it is in
//     flight; when it returns, every waiter tries again. The
//     reservations one batch of decisions starts (the calls one read of a
//     gRPC connection brought) leave together in one call, which takes the
//     open batch as an exact batch's call does: a burst of cold keys costs
//     the store calls of exact mode, not one per key. A reservation is also started ahead
//     of need, when what is owned falls below half a block, so a steady key
//     never waits.
//
//     Store writes: a key's state keeps a credit, the decisions it answered
//     less the writes it sent. A direct decision is one write for one
//     decision; a reservation for waiting decisions answers at least one
//     of them; one ahead of need, or a give-back, is sent only
//     with credit ≥ 1 (a write already saved), or — for a reservation
//     ahead — when the key's rate says more than it owns will be used
//     before its window ends. So a key's writes are at most its decisions
//     (exact mode's one per decision) but for reservations ahead that the
//     rate promised and the traffic did not use.
//
//  4. A sweeper, every Options.Sweep, updates rates, gives back (OpRelease,
//     all keys in one call) what a key holds beyond twice its demand over
//     the horizon (everything once idle; only from credit), and forgets
//     states whose window is over, idle ones, and those of keys answered
//     once that hold nothing after a second (a burst of new keys is not
//     kept and reviewed for the idle time). Nothing is sent for a window that ended.
//
// Why it is never over the limit: a window's reservation grants only the
// counts at or below the limit of the value the store returned, and every
// store operation is atomic, so the counts granted across replicas, plus
// those exact-mode replicas (sluice or envoyproxy/ratelimit) admitted,
// never exceed the limit; a give-back lowers the counter and the grants
// together. A token is used only before its own time and at most Burst·I
// ahead of it, exactly the condition an exact GCRA step checks, so in any
// interval the tokens used fleet-wide fit burst + rate × t.
package lease
