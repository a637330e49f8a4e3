package rlqs

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/engine"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// change is what one reporter is sent this tick: a new assignment
// (replace), or its current one again, for a longer TTL.
type change struct {
	st      *Stream
	r       *reporter
	strat   alloc.Strategy
	share   float64 // the rate the strategy was made of
	ttl     time.Duration
	replace bool
	// skip: held back, nothing is sent.
	skip bool
}

// segment is the token bucket c starts at now.
func (c change) segment(now time.Time) segment {
	sg := segment{from: now, until: now.Add(c.ttl)}
	if c.strat.Kind == alloc.TokenBucket {
		sg.rate, sg.burst = c.strat.Rate(), float64(c.strat.MaxTokens)
	}
	return sg
}

// work is one hub's part of a tick.
type work struct {
	h        *hub
	changes  []change
	reserves []reserved // the tick's reservations for the hub
	take     int        // index of its token take in the tick's ops, or -1
	taken    uint64
	// want is, per window, what the changes the claims call for would
	// need: what the hub keeps of its reservations even when less was
	// sent, so that room it got stays its own until the raises fit.
	want map[int64]uint64
}

type reserved struct {
	window int64
	op     int
}

// tickState is one tick: the hubs served, the store operations sent for
// them, and what goes out afterwards.
type tickState struct {
	now      time.Time
	works    []*work
	ops      []engine.CounterOp
	releases []engine.CounterOp
	out      map[*Stream][]Action
	sc       scratch
}

// tick serves the hubs that have news or assignments to renew. The store
// call is made without the lock, so reports keep arriving meanwhile.
func (s *Service) tick(now time.Time) {
	t := &tickState{now: now, out: make(map[*Stream][]Action)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if cfg := s.rules.Config(); cfg != s.cfg {
		s.cfg = cfg
		for _, h := range s.hubs {
			h.dirty = true
		}
	}
	for _, h := range s.hubs {
		if h.dirty || !now.Before(h.next) {
			t.prepare(s, h)
		}
	}
	s.mu.Unlock()

	err := s.call(t.ops)
	if err != nil {
		s.st.reserveErrors.Inc()
		s.o.logf("rlqs: reserving quota: %v", err)
	}
	s.mu.Lock()
	for _, w := range t.works {
		t.finish(s, w, err)
	}
	s.mu.Unlock()

	for st, acts := range t.out {
		st.sink.Push(acts)
	}
	if err := s.call(t.releases); err != nil {
		s.st.releaseErrors.Inc()
	}
}

// prepare decides the hub's changes and the reservations they need.
func (t *tickState) prepare(s *Service, h *hub) {
	now := t.now
	if h.cfg != s.cfg && !t.reload(s, h) {
		return
	}
	t.sweep(s, h)
	if len(h.reporters) == 0 {
		delete(s.hubs, h.key)
		s.st.buckets.Set(int64(len(s.hubs)))
		return
	}
	w := &work{h: h, take: -1}
	w.changes = h.decide(s, now, 1, nil)
	switch {
	case h.windowed():
		w.want = make(map[int64]uint64)
		for ks, n := range h.need(now, w.changes, &t.sc) {
			c := ceilNeed(n)
			w.want[ks] = c
			if c > h.reserved[ks] {
				w.reserves = append(w.reserves, reserved{window: ks, op: len(t.ops)})
				t.ops = append(t.ops, h.rule.ReserveOp(time.Unix(ks, 0), c-h.reserved[ks], now))
			}
		}
	case h.take > 0 && h.rule.Limit != nil && h.rule.Limit.Algorithm == engine.TokenBucket:
		w.take, w.taken = len(t.ops), h.take
		t.ops = append(t.ops, h.rule.TakeOp(h.take, now))
		h.take = 0
	}
	t.works = append(t.works, w)
}

// finish books what the store granted, fits the changes in it, and
// commits them.
func (t *tickState) finish(s *Service, w *work, err error) {
	h, now := w.h, t.now
	switch {
	case h.windowed() && err != nil:
		// Nothing is known of the store: nobody gets more than was paid
		// for; the Envoys keep what they have until it expires, and the
		// hub asks again soon.
		h.unmark(w.changes)
		w.changes = nil
		defer func() { h.next = minTime(h.next, now.Add(retryShort)) }()
	case h.windowed():
		limit := uint64(h.rule.Limit.RequestsPerUnit)
		for _, rv := range w.reserves {
			op := &t.ops[rv.op]
			g, excess := engine.Granted(op, limit)
			h.reserved[rv.window] += g
			if excess > 0 {
				t.releases = append(t.releases, h.rule.ReleaseOp(time.Unix(rv.window, 0), excess))
			}
		}
		var short bool
		w.changes, short = h.fit(s, now, w.changes, &t.sc)
		if short {
			// Room comes back as cuts land, which their reports tell
			// (they serve the hub); otherwise another replica or RLS
			// callers may give some back: ask again soon.
			defer func() {
				if !h.cutting(now) {
					h.next = minTime(h.next, now.Add(retryShort))
				}
			}()
		}
	case w.take >= 0 && err != nil:
		h.take += w.taken
	}
	h.commit(s, now, w.changes, t.out)
	for _, r := range h.reporters {
		r.served = r.claim
	}
	if h.windowed() {
		t.giveBack(h, w.want)
	}
	h.dirty = false
	h.next = h.nextDue(s, now)
}

// giveBack releases what the hub holds on a window beyond what its Envoys
// may still admit in it and what their claims call for.
func (t *tickState) giveBack(h *hub, want map[int64]uint64) {
	cur, _ := h.rule.Window(t.now)
	need := h.need(t.now, nil, &t.sc)
	for ks, held := range h.reserved {
		if ks < cur.Unix() {
			delete(h.reserved, ks)
			continue
		}
		if n := max(ceilNeed(need[ks]), want[ks]); held > n {
			t.releases = append(t.releases, h.rule.ReleaseOp(time.Unix(ks, 0), held-n))
			h.reserved[ks] = n
		}
	}
}

// fit returns changes, or fewer or smaller ones, that the hub's
// reservations pay for.
//
// First the cuts and renewals go out as they are and the raises by the
// part that fits (a raise costs only the new bucket's tokens, a cut is
// counted beside its replacement until the next report shows it
// applied): moving shares between Envoys of a full limit is cuts first,
// raises as the cuts land, and the hub asks again soon. Only when even
// that does not fit, and no cut is on its way, is the room held by the
// store's other users (replicas, RLS callers): the limit is then scaled to
// what is held, and the shares stay max-min fair.
func (h *hub) fit(s *Service, now time.Time, changes []change, sc *scratch) (_ []change, short bool) {
	if h.short(now, changes, sc) >= 1 {
		return changes, false
	}
	if h.partial(s, now, changes, sc); h.short(now, changes, sc) < 1 && !h.cutting(now) {
		changes = h.scaled(s, now, changes, sc)
	}
	slices.SortFunc(changes, func(a, b change) int { return cmp.Compare(b.raise(), a.raise()) })
	for i := range changes {
		changes[i].r.ch = i
	}
	// The fewest changes, largest raises first, to hold back (or deny)
	// for the rest to fit: holding more back never needs more, so the
	// count is found by bisection.
	orig := slices.Clone(changes)
	fallBack := func(k int) {
		copy(changes, orig)
		for i := range changes[:k] {
			c := &changes[i]
			switch {
			case c.skip:
			case c.r.sent && c.r.until.Sub(now) > retryShort:
				c.skip = true // what it has is paid for; ask again soon
			default:
				// It expires before then and nothing more can be paid for.
				c.strat, c.replace = alloc.Strategy{Kind: alloc.DenyAll}, true
			}
		}
	}
	lo, hi := 0, len(changes)
	for lo < hi {
		k := (lo + hi) / 2
		if fallBack(k); h.short(now, changes, sc) >= 1 {
			hi = k
		} else {
			lo = k + 1
		}
	}
	fallBack(lo)
	if h.short(now, changes, sc) < 1 {
		s.st.overcommitted.Inc()
	}
	return changes, true
}

// partial raises each Envoy that is to get more by the largest part of
// its raise that fits (within 1/64), the cuts and renewals as they are; a
// raise of less than the hysteresis waits.
func (h *hub) partial(s *Service, now time.Time, changes []change, sc *scratch) {
	type raise struct {
		i        int
		from, to float64
	}
	var raises []raise
	for i := range changes {
		if c := &changes[i]; c.replace && c.r.sent && c.raise() > 0 {
			raises = append(raises, raise{i, c.r.cur.Rate(), c.share})
		}
	}
	set := func(g float64) {
		for _, x := range raises {
			c := &changes[x.i]
			c.strat, _ = h.plan.Assign(x.from+g*(x.to-x.from), s.o.Alloc)
			// In a few steps, not token by token: each is a new bucket.
			c.skip = g < 0.25 || c.raise() < s.o.Alloc.Hysteresis*x.from
		}
	}
	lo, hi := 0.0, 1.0
	for range 6 {
		g := (lo + hi) / 2
		set(g)
		if h.short(now, changes, sc) >= 1 {
			lo = g
		} else {
			hi = g
		}
	}
	set(lo)
}

// scaled is the changes for the largest scale of the limit that fits
// (within 1/256), or the changes as they are if only denials would.
func (h *hub) scaled(s *Service, now time.Time, changes []change, sc *scratch) []change {
	lo, hi := 0.0, 1.0
	for range 8 {
		f := (lo + hi) / 2
		h.unmark(changes)
		changes = h.decide(s, now, f, changes[:0])
		if h.short(now, changes, sc) >= 1 {
			lo = f
		} else {
			hi = f
		}
	}
	if lo == 0 {
		lo = 1
	}
	h.unmark(changes)
	return h.decide(s, now, lo, changes[:0])
}

// cutting reports whether a bucket of the hub was cut and the cut is not
// yet known applied.
func (h *hub) cutting(now time.Time) bool {
	for _, r := range h.reporters {
		for _, sg := range r.segs {
			if !sg.cut.IsZero() && sg.until.After(now) {
				return true
			}
		}
	}
	return false
}

// short is the least, over the windows, of what the hub holds ÷ what the
// changes would need (1 when everything fits).
func (h *hub) short(now time.Time, changes []change, sc *scratch) float64 {
	worst := 1.0
	for ks, n := range h.need(now, changes, sc) {
		if held := h.reserved[ks]; ceilNeed(n) > held {
			worst = min(worst, float64(held)/n)
		}
	}
	return worst
}

// raise is how much faster c lets its Envoy go than what it has.
func (c change) raise() float64 {
	if !c.r.sent {
		return c.strat.Rate()
	}
	return c.strat.Rate() - c.r.cur.Rate()
}

// decide is what each live reporter is sent, with the rule's limit scaled
// by f: for a divided limit, max-min fair shares of what is left once the
// ghosts' buckets and every bucket's tokens are set aside.
func (h *hub) decide(s *Service, now time.Time, f float64, out []change) []change {
	live := h.live()
	if len(live) == 0 {
		return out
	}
	var shares []float64
	if h.plan.Kind == alloc.PlanDivide {
		shares = h.shares(s, now, live, f)
	}
	for i, st := range live {
		r := h.reporters[st]
		var share float64
		if shares != nil {
			share = shares[i]
		}
		next, ok := h.plan.Assign(share, s.o.Alloc)
		if !ok {
			continue
		}
		if r.sent && next != r.cur && envoyEqual(r.cur, next) {
			next = distinct(r.cur, next)
		}
		c := change{st: st, r: r, strat: next, share: share, ttl: st.ttl(&s.o.Alloc), replace: true}
		if !r.claim.Known {
			// An equal share while the demand is unknown: held no longer
			// than it must be, since it is paid for until it ends.
			c.ttl = time.Second
		}
		// Renewed with the hub's others whose time is near: the hub is
		// served when the first one is due (half its TTL left), and every
		// one with under three quarters left goes too, so renewals fall
		// together rather than one serve per reporter.
		due := r.until.Sub(now) < c.ttl*3/4
		// A small raise or cut is not worth a replacement: Envoy refills a
		// new bucket, and a cut is counted beside its replacement until
		// it is applied. What the Envoy has is renewed instead, which is
		// safe: what is sent is paid for whatever the division said (fit).
		// Only while the Envoy still has it: one that expired is a new
		// bucket to the Envoy (full again) and a new one to count.
		if r.sent && r.until.After(now) && (alloc.Keep(r.cur, next, s.o.Alloc.Hysteresis) || near(r.cur, next, 2*s.o.Alloc.Hysteresis)) {
			if !due {
				continue
			}
			c.strat, c.replace = r.cur, false
		}
		r.ch = len(out)
		out = append(out, c)
	}
	return out
}

// shares divides the rule's rate, scaled by f, among the live reporters,
// max-min fair over their claims, once the ghosts' buckets still alive and
// the tokens every bucket holds are set aside (the tokens of the shares
// found first, then the division again).
func (h *hub) shares(s *Service, now time.Time, live []*Stream, f float64) []float64 {
	claims := make([]alloc.Claim, len(live))
	for i, st := range live {
		claims[i] = h.reporters[st].claim
	}
	l := h.plan.Limit
	for _, r := range h.reporters {
		if r.ghost && len(r.segs) > 0 && r.segs[len(r.segs)-1].until.After(now) {
			l -= r.segs[len(r.segs)-1].rate
		}
	}
	l = max(l, 0) * f
	_, length := h.rule.Window(now)
	if length <= 0 {
		return alloc.Divide(l, claims, s.o.Alloc, nil)
	}
	w := length.Seconds()
	tokens := func(shares []float64) (n float64) {
		for _, sh := range shares {
			if st, ok := h.plan.Assign(sh, s.o.Alloc); ok {
				n += float64(st.MaxTokens)
			}
		}
		return n
	}
	shares := alloc.Divide(l-(l*s.o.Alloc.Burst.Seconds()+alloc.MinTokens*float64(len(live)))/w, claims, s.o.Alloc, nil)
	t1 := tokens(shares)
	shares = alloc.Divide(max(l-t1/w, 0), claims, s.o.Alloc, shares)
	// Larger shares may hold more tokens than the ones they were set
	// aside for: then divide what is left once the larger count is set
	// aside. Shares only shrink, and with them their tokens, so what is
	// handed out stays within the limit.
	if t2 := tokens(shares); t2 > t1 {
		shares = alloc.Divide(max(l-t2/w, 0), claims, s.o.Alloc, shares)
	}
	return shares
}

// live is the streams of the reporters that are not ghosts, in the order
// the streams were opened.
func (h *hub) live() []*Stream {
	out := make([]*Stream, 0, len(h.reporters))
	for st, r := range h.reporters {
		if !r.ghost {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b *Stream) int { return cmp.Compare(a.id, b.id) })
	return out
}

func (h *hub) unmark(changes []change) {
	for _, c := range changes {
		c.r.ch = -1
	}
}

// retryShort is how soon a hub whose changes did not all fit asks again.
const retryShort = 200 * time.Millisecond

// near reports whether next takes back at most frac of cur's rate, or at
// most one request a second (a whole token: small shares move by tokens).
func near(cur, next alloc.Strategy, frac float64) bool {
	if cur.Kind != alloc.TokenBucket || next.Kind != alloc.TokenBucket {
		return false
	}
	rc, rn := cur.Rate(), next.Rate()
	return rn < rc && rc-rn <= max(frac*rc, 1)
}

// envoyEqual reports whether Envoy takes a and b for the same token bucket:
// it compares max_tokens, tokens_per_fill and the nanoseconds of
// fill_interval, so buckets that differ only in whole seconds of
// fill_interval look equal and the Envoy keeps the one it has.
func envoyEqual(a, b alloc.Strategy) bool {
	return a.Kind == alloc.TokenBucket && b.Kind == alloc.TokenBucket && a.MaxTokens == b.MaxTokens &&
		a.TokensPerFill == b.TokensPerFill && a.FillInterval%time.Second == b.FillInterval%time.Second
}

// distinct is next written so that Envoy tells it from cur: the same rate
// (tokens accrue continuously at tokens_per_fill ÷ fill_interval) and the
// same bucket, with tokens_per_fill and fill_interval both multiplied.
func distinct(cur, next alloc.Strategy) alloc.Strategy {
	for k := uint32(2); ; k++ {
		d := next
		d.TokensPerFill *= k
		d.FillInterval *= time.Duration(k)
		if !envoyEqual(cur, d) {
			return d
		}
	}
}
