package alloc

import (
	"math"
	"slices"
	"time"
)

// windows lays out the windows from the current one to the end of what is
// counted and of the next renewal's reach, and what is held and needed in
// each.
func (p *Planner) windows() {
	in, o := p.in, &p.O
	w := in.Window
	p.base = in.Now - mod(in.Now, w)
	end := in.Now
	for _, i := range p.live {
		r := &in.Reporters[i]
		end = max(end, in.Now+int64(o.RenewFor(r)+o.Delivery+o.TTLFor(r)))
	}
	for i := range in.Reporters {
		for _, sg := range in.Reporters[i].Segs {
			end = max(end, sg.Until)
		}
	}
	p.nwin = int((end-p.base)/w) + 1
	p.held = resize(p.held, p.nwin)
	for _, h := range in.Held {
		if k := p.index(h.Window); k >= 0 && k < p.nwin {
			p.held[k] = float64(h.N)
		}
	}
	p.limitHits = math.Floor(in.Plan.Limit*float64(w)/1e9 + 1e-9)
	p.fligh = resize(p.fligh, p.nwin)
	for _, h := range in.InFlight {
		if k := p.index(h.Window); k >= 0 && k < p.nwin {
			p.fligh[k] += float64(h.N)
		}
	}
	p.baseN = resize(p.baseN, p.nwin)
	p.need = resize(p.need, p.nwin)
	p.tmp = resize(p.tmp, p.nwin)
	for len(p.rNeed) < len(in.Reporters) {
		p.rNeed = append(p.rNeed, nil)
	}
	for i := range in.Reporters {
		p.rNeed[i] = resize(p.rNeed[i], p.nwin)
		p.addNeed(p.rNeed[i], in.Reporters[i].Segs)
		for k, v := range p.rNeed[i] {
			p.baseN[k] += v
		}
	}
}

func (p *Planner) index(window int64) int {
	if window < p.base {
		return -1
	}
	return int((window - p.base) / p.in.Window)
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func resize(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// addNeed adds to need, per window, the most one Envoy may admit in it
// under segs: at any moment it enforces one of them, so in a window it
// spends at most every overlapping bucket's tokens and, at each moment,
// the fastest rate it may hold then. The whole window counts, what was
// spent before now too: the window's counter holds it.
func (p *Planner) addNeed(need []float64, segs []Seg) {
	if len(segs) == 0 {
		return
	}
	w := p.in.Window
	if len(segs) == 1 {
		// Most reporters have one bucket: its tokens in every window it
		// reaches, and its rate over its part of each.
		sg := segs[0]
		for k := max(0, int((sg.From-p.base)/w)); k < len(need); k++ {
			ks, ke := p.base+int64(k)*w, p.base+int64(k+1)*w
			if ks >= sg.Until {
				break
			}
			if a, b := max(ks, sg.From), min(ke, sg.Until); b > a {
				need[k] += sg.Burst + sg.Rate*float64(b-a)/1e9
			}
		}
		return
	}
	// Every Seg's tokens in each window it reaches.
	lo, hi := p.base, p.base+int64(len(need))*w
	for _, sg := range segs {
		for k := max(0, int((sg.From-p.base)/w)); k < len(need); k++ {
			ks := p.base + int64(k)*w
			if ks >= sg.Until {
				break
			}
			if min(ks+w, sg.Until) > max(ks, sg.From) {
				need[k] += sg.Burst
			}
		}
	}
	// The fastest rate at each moment: between consecutive ends of Segs,
	// the same Segs cover every moment.
	pts := p.cuts[:0]
	for _, sg := range segs {
		pts = append(pts, min(max(sg.From, lo), hi), min(max(sg.Until, lo), hi))
	}
	slices.Sort(pts)
	p.cuts = pts
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if b <= a {
			continue
		}
		rate := 0.0
		for _, sg := range segs {
			if sg.From <= a && sg.Until >= b {
				rate = max(rate, sg.Rate)
			}
		}
		if rate == 0 {
			continue
		}
		for k := int((a - p.base) / w); k < len(need); k++ {
			ks := p.base + int64(k)*w
			if ks >= b {
				break
			}
			if x, y := max(a, ks), min(b, ks+w); y > x {
				need[k] += rate * float64(y-x) / 1e9
			}
		}
	}
}

// LegacyCredit is what a new bucket of a client that may refill on a
// renewal (Reporter.Refill: the per-worker client) may admit beyond
// max_tokens and its rate. That client's TokenBucketImpl (client_impl.cc;
// source/common/common/token_bucket_impl.cc) refills in consume only a
// bucket that is not full, and only then moves its last fill time: a new
// bucket's first request finds it full, and its second is credited the
// time since the bucket was made as well, up to one token more than the
// bucket held. The global client's AtomicTokenBucketImpl has no such
// credit (rlqssim's TestLegacyBucketOneMore plays both).
const LegacyCredit = 1

// SegOf is the Seg of a strategy decided at from and enforced at most
// until; ok is false for blanket rules (nothing to count).
func SegOf(s Strategy, from, until int64) (Seg, bool) {
	if s.Kind != TokenBucket {
		return Seg{}, false
	}
	return Seg{From: from, Until: until, Rate: s.Rate(), Burst: float64(s.MaxTokens)}, true
}

// segsWith is r's Segs as they would be with c committed at now; more
// renews it once more at the next renewal (for what to reserve).
func (p *Planner) segsWith(r *Reporter, c *Change, more bool) []Seg {
	o := &p.O
	segs := append(p.segs[:0], r.Segs...)
	segs = applyChange(segs, r, c, p.in.Now, o.Delivery)
	if more && c.Strat.Kind == TokenBucket {
		next := Change{Strat: c.Strat, TTL: c.TTL}
		at := p.in.Now + int64(o.RenewFor(r))
		rr := *r
		rr.Sent, rr.Cur = true, c.Strat
		segs = applyChange(segs, &rr, &next, at, o.Delivery)
	}
	p.segs = segs
	return segs
}

// applyChange is segs with c made at now: a new Seg for a new bucket (and
// for a renewal that may refill it), else the current one lasts longer.
func applyChange(segs []Seg, r *Reporter, c *Change, now int64, delivery time.Duration) []Seg {
	until := now + int64(delivery+c.TTL)
	if c.Replace || (r.Refill && c.Strat.Kind == TokenBucket) {
		for i := range segs {
			if segs[i].Cut == 0 {
				segs[i].Cut = now
			}
		}
		if sg, ok := SegOf(c.Strat, now, until); ok {
			if r.Refill {
				sg.Burst += LegacyCredit
			}
			segs = append(segs, sg)
		}
		return segs
	}
	if n := len(segs); n > 0 && segs[n-1].Cut == 0 && c.Strat.Kind == TokenBucket {
		segs[n-1].Until = max(segs[n-1].Until, until)
	}
	return segs
}

// Commit makes c r's assignment, decided at now.
func Commit(r *Reporter, c Change, now int64, o Options) {
	r.Segs = applyChange(r.Segs, r, &c, now, o.Delivery)
	r.Sent, r.Cur, r.CurTTL, r.LastSend = true, c.Strat, c.TTL, now
}

// Confirm takes a report that r's stream received at: a replacement
// decided at least two deliveries before it was applied by the time the
// report was sent, so the bucket it replaced ends one delivery after the
// replacement. It reports whether any Seg ended earlier than counted.
func Confirm(r *Reporter, at int64, o Options) bool {
	d := int64(o.Delivery)
	changed := false
	for i := range r.Segs {
		sg := &r.Segs[i]
		if sg.Cut != 0 && sg.Cut+2*d <= at && sg.Until > sg.Cut+d {
			sg.Until = sg.Cut + d
			changed = true
		}
	}
	return changed
}

// ConfirmAck takes a transport's acknowledgement that every assignment
// decided at or before upTo reached r's Envoy by at (its connection read
// them: an HTTP/2 PING written behind them was answered): a bucket
// replaced by then ends one delivery after at, when the Envoy has applied
// what it read. It reports whether any Seg ended earlier than counted.
func ConfirmAck(r *Reporter, upTo, at int64, o Options) bool {
	end := at + int64(o.Delivery)
	changed := false
	for i := range r.Segs {
		sg := &r.Segs[i]
		if sg.Cut != 0 && sg.Cut <= upTo && sg.Until > max(end, sg.Cut) {
			sg.Until = max(end, sg.Cut)
			changed = true
		}
	}
	return changed
}

// Forget drops the Segs that end before from (the start of the current
// window, or now for rules without windows): they count nowhere any more.
func Forget(r *Reporter, from int64) {
	r.Segs = slices.DeleteFunc(r.Segs, func(sg Seg) bool { return sg.Until <= from })
}
