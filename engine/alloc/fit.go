package alloc

import (
	"cmp"
	"math"
	"slices"
)

// need sets p.need to the need per window with changes ch committed.
func (p *Planner) needWith(ch []Change, more bool) {
	copy(p.need, p.baseN)
	for i := range ch {
		c := &ch[i]
		r := &p.in.Reporters[c.R]
		for k, v := range p.rNeed[c.R] {
			p.need[k] -= v
		}
		clear(p.tmp)
		p.addNeed(p.tmp, p.segsWith(r, c, more))
		for k, v := range p.tmp {
			p.need[k] += v
		}
	}
}

// short is the least, over the windows, of held ÷ need with ch committed
// (1 when everything fits). A window already over before the changes only
// needs them to add nothing there.
func (p *Planner) short(ch []Change) float64 {
	p.needWith(ch, false)
	worst := 1.0
	for k, n := range p.need {
		held := max(p.held[k]-p.cutRoom, ceilNeed(p.baseN[k]))
		if ceilNeed(n) > held {
			worst = min(worst, held/n)
		}
	}
	return worst
}

// ceilNeed is n in whole hits, rounded up (and a hair of float error down).
func ceilNeed(n float64) float64 { return math.Ceil(n - 1e-9) }

// fit sets out.Changes to the changes the division asks for, or fewer or
// smaller ones, that what the hub holds pays for.
//
// Everything as asked when it fits. Otherwise the changes are taken one by
// one, in order of need: the renewals of assignments that would expire
// before the hub plans again, then the cuts (they make room once known
// applied), then the first shares of new Envoys (smallest first), then
// the raises (smallest rate first, so the least served catch up first).
// Each takes what fits beside those taken before it: a raise or a first
// share the largest part of itself that fits (a raise of less than a
// quarter, or under the hysteresis, waits: each is a new bucket); a change
// whose Envoy has time waits; one that cannot wait becomes the largest
// smaller bucket that fits, or DENY_ALL, which always fits.
func (p *Planner) fit(out *Output) {
	p.ch = p.ch[:0]
	for j, a := range p.asks {
		if a.send {
			p.ch = append(p.ch, Change{R: a.r, Strat: a.target, TTL: a.ttl, Replace: a.replace, ask: j})
		}
	}
	defer p.checkCommitted(out)
	if len(p.ch) == 0 {
		return
	}
	if p.short(p.ch) >= 1 {
		out.Changes = append(out.Changes, p.ch...)
		p.needSent = true // p.need is with out.Changes: reserve needs it
		return
	}
	out.Short = true
	p.roomLeft = false
	defer func() { out.Spent = !p.roomLeft }()
	for i := range p.ch {
		p.ch[i].rank = p.rank(&p.ch[i])
	}
	slices.SortStableFunc(p.ch, func(a, b Change) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if a.rank == 1 {
			// The largest cuts first: they free the most.
			return cmp.Compare(p.asks[b.ask].share-p.curRate(b.R), p.asks[a.ask].share-p.curRate(a.R))
		}
		return cmp.Compare(p.curRate(a.R), p.curRate(b.R))
	})
	// acc is the need with the changes taken so far.
	p.acc = append(p.acc[:0], p.baseN...)
	for i := range p.ch {
		p.fitOne(&p.ch[i])
	}
	p.normalize()
	out.Changes = append(out.Changes, p.keep(p.ch)...)
}

// fitOne takes c, or the part of it that fits, or holds it back (fit's
// rules, for one change).
func (p *Planner) fitOne(c *Change) {
	in := p.in
	a := &p.asks[c.ask]
	r := &in.Reporters[c.R]
	p.cRoom = false
	if p.take(c) {
		return
	}
	from := p.curRate(c.R)
	kept := r.Sent && a.target == r.Cur // the division keeps what it has
	if a.target.Kind == TokenBucket && a.share > from && !kept {
		// The largest part of the raise that fits (a part under
		// smallRaise waits, below: the search stops there).
		floor := 0.0
		if r.Sent && r.Cur.Kind == TokenBucket {
			floor = smallRaise
		}
		g := p.largest(c, from, a.share-from, floor)
		s := p.strategyNear(c.R, from+g*(a.share-from))
		small := r.Sent && r.Cur.Kind == TokenBucket && (g < smallRaise || s.Rate()-from < p.O.Hysteresis*from)
		if !small && s.Kind == TokenBucket && p.try(c, s) {
			c.Strat, c.Replace = s, true
			p.take(c)
			return
		}
	}
	// It waits, if it can: the Envoy keeps what it has until its
	// renewal's deadline (the TTL covers a cut stream only while a
	// renewal goes out by then; a renewal is planned a little before
	// RenewAt, so a reservation has that long to come back). A new
	// Envoy waits for the reservation this plan asks for, or one on its
	// way (its own no_assignment_behavior applies meanwhile, as it did
	// since its first request: one store call more), unless the store
	// just said the limit is spent, or the hub holds all of it wherever
	// the Envoy's share did not fit (no reservation can pay for it).
	if r.Sent && in.Now < p.O.renewDeadline(r) || !r.Sent && (len(in.InFlight) > 0 || !in.Full && p.cRoom) {
		c.Strat = Strategy{Kind: skipKind}
		return
	}
	// It cannot: what the Envoy has, renewed, if that fits; else the
	// largest smaller bucket that fits; else DENY_ALL.
	if r.Sent && r.Cur.Kind != DenyAll {
		c.Strat, c.Replace = r.Cur, false
		if r.LastSend+int64(r.CurTTL) <= in.Now {
			c.Replace = true
		}
		if p.take(c) {
			return
		}
	}
	top := from
	if top == 0 {
		top = a.share
	}
	f := p.largest(c, 0, top, 0)
	if s := p.strategyNear(c.R, f*top); f > 0 && s.Kind == TokenBucket && p.try(c, s) {
		c.Strat, c.Replace = s, true
	} else {
		c.Strat, c.Replace = Strategy{Kind: DenyAll}, true
	}
	if !p.take(c) {
		// DENY_ALL adds nothing; only a hub already over can refuse it.
		c.Strat = Strategy{Kind: DenyAll}
		p.take(c)
	}
}

// largest is the largest fraction f (to 1/64) for which a bucket of
// from+f·span fits beside the changes taken; below floor it stops looking
// (the caller takes no part under floor), and returns a fraction under it.
func (p *Planner) largest(c *Change, from, span, floor float64) float64 {
	lo, hi := 0.0, 1.0
	for range 6 {
		if hi <= floor {
			break
		}
		g := (lo + hi) / 2
		if p.try(c, p.strategyNear(c.R, from+g*span)) {
			lo = g
		} else {
			hi = g
		}
	}
	return lo
}

// rank orders changes by how much they must go now.
func (p *Planner) rank(c *Change) int8 {
	a := &p.asks[c.ask]
	r := &p.in.Reporters[c.R]
	switch {
	case p.due[c.R]:
		return 0 // a renewal (or change) that cannot wait
	case a.target.Kind != TokenBucket || a.share <= p.curRate(c.R):
		return 1 // a cut, a blanket rule, a renewal
	case !r.Sent || r.Cur.Kind != TokenBucket:
		return 2 // a first share (or from DENY_ALL)
	}
	return 3 // a raise
}

func (p *Planner) curRate(i int) float64 {
	r := &p.in.Reporters[i]
	if r.Sent && r.Cur.Kind == TokenBucket {
		return r.Cur.Rate()
	}
	return 0
}

// strategyNear is the strategy of share for r, written apart from r's
// current one if Envoy would take them for the same.
func (p *Planner) strategyNear(i int, share float64) Strategy {
	r := &p.in.Reporters[i]
	s := p.strategy(i, share)
	if r.Sent && s != r.Cur && EnvoyEqual(r.Cur, s) {
		s = Distinct(r.Cur, s)
	}
	return s
}

// delta is, per window, what c adds to its reporter's committed need
// (p.tmp).
func (p *Planner) delta(c *Change) []float64 {
	clear(p.tmp)
	p.addNeed(p.tmp, p.segsWith(&p.in.Reporters[c.R], c, false))
	for k, v := range p.rNeed[c.R] {
		p.tmp[k] -= v
	}
	return p.tmp
}

// try reports whether c with strategy s (a new bucket, or a renewal when
// it is the reporter's current one) fits beside the changes taken. A
// change that gives its Envoy more leaves the cut room alone.
func (p *Planner) try(c *Change, s Strategy) bool {
	r := &p.in.Reporters[c.R]
	cc := *c
	cc.Strat, cc.Replace = s, !(r.Sent && s == r.Cur) || r.LastSend+int64(r.CurTTL) <= p.in.Now
	slack := 0.0
	if s.Kind == TokenBucket && (!r.Sent || r.Cur.Kind != TokenBucket || s.Rate() > r.Cur.Rate()) {
		slack = p.cutRoom
	}
	d := p.delta(&cc)
	for k, v := range d {
		n := p.acc[k] + v
		if ceilNeed(n) > max(p.held[k]-slack, ceilNeed(p.baseN[k])) && v > 1e-9 {
			if p.held[k] < p.limitHits {
				p.roomLeft, p.cRoom = true, true
			}
			return false
		}
	}
	return true
}

// take adds c, as it stands, to the changes taken if it fits.
func (p *Planner) take(c *Change) bool {
	if c.Strat.Kind == skipKind {
		return true
	}
	r := &p.in.Reporters[c.R]
	if !p.try(c, c.Strat) {
		return false
	}
	cc := *c
	cc.Replace = c.Replace || !(r.Sent && c.Strat == r.Cur)
	for k, v := range p.delta(&cc) {
		p.acc[k] += v
	}
	return true
}

// smallRaise is the least part of a raise that is sent on its own: each
// part is a new bucket, full.
const smallRaise = 0.25

// skipKind marks a change held back.
const skipKind Kind = 255

// keep is ch without the held-back changes.
func (p *Planner) keep(ch []Change) []Change {
	k := p.kept[:0]
	for _, c := range ch {
		if c.Strat.Kind != skipKind {
			k = append(k, c)
		}
	}
	p.kept = k
	return k
}

// hold makes c keep what r has: renewed if due, else nothing.
func (p *Planner) hold(c *Change, r *Reporter) {
	c.Strat, c.Replace = r.Cur, false
	if !p.renewDue(c.R) {
		c.Strat = Strategy{Kind: skipKind}
	}
}

// normalize turns a change into what the Envoy has into a renewal (when
// due) or nothing.
func (p *Planner) normalize() {
	for i := range p.ch {
		c := &p.ch[i]
		r := &p.in.Reporters[c.R]
		if c.Strat.Kind != skipKind && r.Sent && c.Strat == r.Cur && r.LastSend+int64(r.CurTTL) > p.in.Now {
			p.hold(c, r)
		}
	}
}

// checkCommitted flags a hub whose Envoys may already admit more than it
// holds in some window.
func (p *Planner) checkCommitted(out *Output) {
	for k, n := range p.baseN {
		if ceilNeed(n) > p.held[k] {
			out.Overcommitted = true
			return
		}
	}
}

// reserve asks for what the division wants (every live reporter at its
// target, renewed once more, beside everything still counted) and gives
// back what is held beyond both that and what the changes sent need.
func (p *Planner) reserve(out *Output) {
	in := p.in
	if !p.needSent {
		p.needWith(out.Changes, false)
	}
	p.after = append(p.after[:0], p.need...)
	after := p.after
	// Every live reporter as the division would have it, renewed once
	// more.
	p.ch = p.ch[:0]
	for _, a := range p.asks {
		p.ch = append(p.ch, Change{R: a.r, Strat: a.target, TTL: a.ttl, Replace: a.replace && a.send})
	}
	p.needWith(p.ch, true)
	want := p.need
	limit := p.limitHits
	if len(p.live) > 0 {
		for k := range want {
			want[k] += p.cutRoom + p.joinRoom
		}
	}
	for k := range want {
		ws := p.base + int64(k)*in.Window
		// No more than the limit: the store grants no more, and asking
		// it only to be refused made the hub short on every answer. What
		// the changes sent need is held already (after ≤ held).
		w := min(ceilNeed(max(want[k], after[k])), max(limit, p.held[k]))
		switch {
		case p.fligh[k] > 0:
		case w > p.held[k]:
			out.Reserve = append(out.Reserve, Hold{Window: ws, N: uint64(w - p.held[k])})
		case p.held[k]-w >= max(1, releaseFrac*limit):
			// Not for a little: what is given back now is asked for again
			// at the next change, one store call each.
			out.Release = append(out.Release, Hold{Window: ws, N: uint64(p.held[k] - w)})
		}
	}
	for _, h := range in.Held {
		if k := p.index(h.Window); k >= p.nwin && h.N > 0 {
			out.Release = append(out.Release, h)
		}
	}
}
