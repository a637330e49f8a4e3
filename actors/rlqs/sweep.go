package rlqs

import (
	"slices"
	"time"

	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// commit sends the changes: each becomes the reporter's assignment, and an
// action on its stream.
func (h *hub) commit(s *Service, now time.Time, changes []change, out map[*Stream][]Action) {
	for _, c := range changes {
		r := c.r
		r.ch = -1
		if r.ghost || c.skip {
			continue // its stream ended, or it was abandoned, meanwhile
		}
		if c.replace {
			if h.plan.Kind == alloc.PlanDivide {
				for i := range r.segs {
					if r.segs[i].until.After(now) && r.segs[i].cut.IsZero() {
						r.segs[i].cut = now
					}
				}
				r.segs = append(r.segs, c.segment(now))
			}
			r.cur = c.strat
			s.st.assignments.Inc()
		} else {
			if n := len(r.segs); n > 0 {
				r.segs[n-1].until = now.Add(c.ttl)
			}
			s.st.kept.Inc()
		}
		r.sent, r.until = true, now.Add(c.ttl)
		out[c.st] = append(out[c.st], Action{Key: h.key, Bucket: h.bucket, Strategy: c.strat, TTL: c.ttl})
	}
}

// sweep forgets what can no longer be spent, and abandons idle reporters.
func (t *tickState) sweep(s *Service, h *hub) {
	now := t.now
	from, length := h.rule.Window(now)
	if length == 0 {
		from = now
	}
	for st, r := range h.reporters {
		r.segs = slices.DeleteFunc(r.segs, func(sg segment) bool { return !sg.until.After(from) })
		if r.ghost {
			if len(r.segs) == 0 && !r.until.After(now) {
				h.drop(st)
			}
			continue
		}
		if now.Sub(r.busy) > s.o.IdleAfter || now.Sub(r.last) > s.o.IdleAfter {
			// The Envoy erases the bucket; what it was sent stays counted
			// until it ends, in case the action is lost with the stream.
			r.ghost = true
			t.out[st] = append(t.out[st], Action{Key: h.key, Bucket: h.bucket, Abandon: true})
			s.st.abandons.Inc()
		}
	}
}

// drop forgets st's reporter.
func (h *hub) drop(st *Stream) {
	delete(h.reporters, st)
	delete(st.hubs, h)
}

// reload looks the hub's rule up again in a new config. A bucket whose rule
// is gone, when buckets matching no rule get no assignment, is abandoned
// by every Envoy (and the hub forgotten): false.
func (t *tickState) reload(s *Service, h *hub) bool {
	was := h.rule.Limit
	h.lookup(s)
	if h.plan.Kind == alloc.PlanNone && was != nil {
		for st, r := range h.reporters {
			if !r.ghost {
				t.out[st] = append(t.out[st], Action{Key: h.key, Bucket: h.bucket, Abandon: true})
				s.st.abandons.Inc()
			}
			h.drop(st)
		}
		delete(s.hubs, h.key)
		s.st.buckets.Set(int64(len(s.hubs)))
		return false
	}
	if l := h.rule.Limit; was == nil || l == nil || l.Unit != was.Unit || l.Algorithm != was.Algorithm {
		// Other keys: what the hub held stays counted until its windows end.
		clear(h.reserved)
	}
	return true
}

// nextDue is when the hub must be served again without news: an
// assignment to renew, a bucket to forget, a reporter gone idle.
func (h *hub) nextDue(s *Service, now time.Time) time.Time {
	next := now.Add(s.o.IdleAfter)
	for st, r := range h.reporters {
		if !r.ghost {
			if r.sent {
				next = minTime(next, r.until.Add(-st.ttl(&s.o.Alloc)/2))
			}
			next = minTime(next, minTime(r.busy, r.last).Add(s.o.IdleAfter))
		}
		for _, sg := range r.segs {
			if sg.until.After(now) {
				next = minTime(next, sg.until)
			}
		}
	}
	return next
}
