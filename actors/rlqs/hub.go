package rlqs

import (
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/engine"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// hub is one bucket of one domain on this replica: the Envoys that report
// it (through their streams), what each was sent, and the counts the hub
// holds on the rule's window counters to pay for it.
type hub struct {
	key    string
	domain string
	bucket map[string]string
	cfg    *engine.Config
	rule   engine.QuotaRule
	plan   alloc.Plan
	// reporters, by stream; a ghost is a reporter whose stream ended or
	// that was abandoned, kept while what it was sent may still be spent.
	reporters map[*Stream]*reporter
	// reserved is what the hub added to the counter of each window (by
	// the window's start, unix seconds) and has not given back.
	reserved map[int64]uint64
	// take is what token-bucket rules' Envoys reported admitted and the
	// hub has not yet taken from the shared bucket.
	take  uint64
	dirty bool
	next  time.Time
}

// reporter is one Envoy's view of the bucket.
type reporter struct {
	claim alloc.Claim
	// served is the claim the hub last divided with.
	served alloc.Claim
	last   time.Time // its last report
	busy   time.Time // its last report with requests
	// cur was sent (sent is true), and lives until until.
	cur   alloc.Strategy
	sent  bool
	until time.Time
	// segs are the token buckets the Envoy may be enforcing, the last one
	// cur's; an assignment the Envoy may still use after a later one
	// replaced it stays until it is known applied (segment.cut).
	segs  []segment
	ghost bool
	// ch indexes the tick's changes while a tick serves the hub (-1: none).
	ch int
}

// segment is one token bucket an Envoy was sent: from when to when it may
// enforce it, at what rate, holding how many tokens.
type segment struct {
	rate, burst float64
	from, until time.Time
	// cut is when a replacement was sent: once the Envoy reports on the
	// same stream 2×Delivery after it, the segment ends at cut.
	cut time.Time
}

func (s *Service) newHub(key, domain string, bucket map[string]string) *hub {
	h := &hub{key: key, domain: domain, bucket: bucket,
		reporters: make(map[*Stream]*reporter), reserved: make(map[int64]uint64)}
	h.lookup(s)
	s.hubs[key] = h
	s.st.buckets.Set(int64(len(s.hubs)))
	return h
}

// lookup finds the hub's rule in the current config. A descriptor the store
// cannot hold a key for is served as matching no rule (and counted).
func (h *hub) lookup(s *Service) {
	h.cfg = s.rules.Config()
	r, _, err := s.rules.QuotaRule(h.domain, alloc.Entries(h.bucket, s.o.Alloc.KeyOrder[h.domain]))
	if err != nil {
		s.st.lookupErrors.Inc()
		r = engine.QuotaRule{}
	}
	h.rule = r
	h.plan = alloc.PlanFor(r.Limit, s.o.Alloc)
}

// windowed is whether the hub reserves on window counters ahead of what
// its Envoys may spend (fixed and sliding windows); token-bucket rules
// are counted from the reports instead.
func (h *hub) windowed() bool {
	_, length := h.rule.Window(time.Time{})
	return h.plan.Kind == alloc.PlanDivide && length > 0
}

// report takes st's usage of the bucket.
func (h *hub) report(st *Stream, u *Usage, now time.Time, s *Service) {
	r := h.reporters[st]
	news := false // something the next tick must act on
	if r == nil {
		r = &reporter{busy: now, ch: -1}
		h.reporters[st] = r
		st.hubs[h] = struct{}{}
		news = true
	} else if r.ghost {
		// Abandoned, and subscribed again: what it was sent still counts.
		r.ghost, r.sent, r.busy = false, false, now
		news = true
	}
	var observed time.Duration
	if !r.last.IsZero() {
		observed = now.Sub(r.last)
	}
	if c := alloc.Rate(u.Allowed, u.Denied, u.Elapsed, observed); c.Known || !r.claim.Known {
		news = news || moved(r.served, c, s.o.Alloc.Hysteresis)
		r.claim = c
	}
	r.last = now
	if u.Allowed+u.Denied > 0 {
		r.busy = now
	}
	for i := range r.segs {
		sg := &r.segs[i]
		if !sg.cut.IsZero() && now.Sub(sg.cut) >= 2*s.o.Delivery {
			sg.until = minTime(sg.until, sg.cut)
			sg.cut = time.Time{}
			news = true // room for raises
		}
	}
	h.count(u)
	// A report that changes nothing the division uses is served at the
	// hub's next renewal: with many Envoys reporting at their own moments,
	// serving every hub on every report would divide each bucket on every
	// tick.
	h.dirty = h.dirty || news || !r.sent
}

// moved reports whether a claim differs from the one the reporter's
// assignment was made from by more than frac of it (or became known).
func moved(served, c alloc.Claim, frac float64) bool {
	if served.Known != c.Known {
		return true
	}
	return math.Abs(c.Rate-served.Rate) > frac*max(served.Rate, 1)
}

// count adds a report to the rule's statistics, as RLS decisions count.
func (h *hub) count(u *Usage) {
	l := h.rule.Limit
	if l == nil || l.Unlimited {
		return
	}
	n := u.Allowed + u.Denied
	st := h.rule.Stats
	st.TotalHits.Add(n)
	st.WithinLimit.Add(u.Allowed)
	st.OverLimit.Add(u.Denied)
	if h.plan.Shadow {
		if over := float64(n) - h.plan.Limit*u.Elapsed.Seconds(); over >= 1 {
			st.ShadowMode.Add(uint64(over))
		}
	}
	if l.Algorithm == engine.TokenBucket {
		h.take += u.Allowed
	}
}

// scratch is the memory the tick's need computations reuse (the tick's
// one goroutine owns it).
type scratch struct {
	need map[int64]float64
	segs []segment
	cuts []int64
}

// need is, per window from the one holding now, the most the Envoys may
// admit in it under what they were sent and what changes would send.
func (h *hub) need(now time.Time, changes []change, sc *scratch) map[int64]float64 {
	if sc.need == nil {
		sc.need = make(map[int64]float64)
	}
	clear(sc.need)
	cur, length := h.rule.Window(now)
	for _, r := range h.reporters {
		segs := append(sc.segs[:0], r.segs...)
		if r.ch >= 0 && !changes[r.ch].skip {
			if c := changes[r.ch]; c.replace {
				segs = append(segs, c.segment(now))
			} else if len(segs) > 0 {
				segs[len(segs)-1].until = now.Add(c.ttl)
			}
		}
		sc.segs = segs
		sc.addNeed(segs, cur.UnixNano(), int64(length))
	}
	return sc.need
}

// addNeed adds, for each window of length from cur on (unix nanoseconds),
// the most one Envoy may admit in it under segs: at any moment it
// enforces one of them (a replacement it may or may not have applied yet
// is one or the other), so in a window it spends at most every bucket's
// tokens and, at each moment, the fastest rate of the buckets it may hold
// then.
func (sc *scratch) addNeed(segs []segment, cur, length int64) {
	end := cur
	for _, sg := range segs {
		end = max(end, sg.until.UnixNano())
	}
	for ks := cur; ks < end; ks += length {
		ke := ks + length
		burst := 0.0
		cuts := sc.cuts[:0]
		for _, sg := range segs {
			a, b := max(ks, sg.from.UnixNano()), min(ke, sg.until.UnixNano())
			if b > a {
				burst += sg.burst
				cuts = append(cuts, a, b)
			}
		}
		sc.cuts = cuts
		if len(cuts) == 0 {
			continue
		}
		slices.Sort(cuts)
		spent := burst
		for i := 1; i < len(cuts); i++ {
			a, b := cuts[i-1], cuts[i]
			if b <= a {
				continue
			}
			rate := 0.0
			for _, sg := range segs {
				if sg.from.UnixNano() <= a && sg.until.UnixNano() >= b {
					rate = max(rate, sg.rate)
				}
			}
			spent += rate * float64(b-a) / 1e9
		}
		sc.need[ks/1e9] += spent
	}
}

// ceilNeed is n in whole hits, rounded up (and a hair of float error down).
func ceilNeed(n float64) uint64 { return uint64(math.Ceil(n - 1e-9)) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
