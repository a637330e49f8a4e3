package alloc

import "time"

// This file is when Envoys are renewed, and for how long: the timing that
// keeps an assignment from lapsing on a healthy stream (see plan.go).

// periodOr is an Envoy's observed report period, or Options.ReportPeriod
// while it is not known (0).
func (o Options) periodOr(period time.Duration) time.Duration {
	if period <= 0 {
		return o.ReportPeriod
	}
	return period
}

// MinRenew and MaxRenew bound RenewEvery.
const (
	MinRenew = 500 * time.Millisecond
	MaxRenew = 2 * time.Second
)

// RenewEvery is how often a live Envoy reporting every period is renewed
// unasked: a quarter of the period, within [MinRenew, MaxRenew].
func (o Options) RenewEvery(period time.Duration) time.Duration {
	return min(max(o.periodOr(period)/4, MinRenew), MaxRenew)
}

// AssignTTL is the assignment_time_to_live for an Envoy reporting every
// period (0: not yet known, Options.ReportPeriod): long enough that an
// Envoy whose stream is cut just before a renewal reached it reopens the
// stream at its next report timer and is answered before its assignment
// ends: a report period, a renewal period and a delivery (the renewals
// it got were at most that far apart), and the margin for the answer; in
// whole seconds, at least MinTTL.
func (o Options) AssignTTL(period time.Duration) time.Duration {
	return o.ttlWith(period, o.RenewEvery(period))
}

func (o Options) ttlWith(period, renew time.Duration) time.Duration {
	ttl := max(o.MinTTL, o.periodOr(period)+renew+o.Delivery+o.Margin)
	return (ttl + time.Second - 1).Truncate(time.Second)
}

// RenewFor is how often r is renewed: RenewEvery, or, for an Envoy that may
// refill its bucket on an equal renewal, once per report period (each
// renewal costs it a full bucket, and the report after it confirms the
// one before).
func (o Options) RenewFor(r *Reporter) time.Duration {
	if !r.Refill {
		return o.RenewEvery(r.Period)
	}
	return min(max(o.periodOr(r.Period), MinRenew), 2*o.ReportPeriod)
}

// TTLFor is the assignment_time_to_live for r (AssignTTL with r's renewal
// period).
func (o Options) TTLFor(r *Reporter) time.Duration {
	return o.ttlWith(r.Period, o.RenewFor(r))
}

// renewDue reports whether reporter i (sent an assignment) is renewed in
// this plan: its renewal is due (mustRenew), or another's is and its own
// is within renewSlack.
func (p *Planner) renewDue(i int) bool {
	r := &p.in.Reporters[i]
	return p.due[i] || p.batch && p.in.Now >= p.O.RenewAt(r)-p.O.renewSlack(r)
}

// mustRenew reports whether r's renewal is due: it may not wait for a
// later plan.
func (p *Planner) mustRenew(r *Reporter) bool {
	return p.in.Now >= p.O.RenewAt(r)-p.O.renewLead(r)
}

// renewSlack is how early a renewal may go with another: when a hub plans
// because one reporter's renewal is due, every reporter due within half a
// renewal period is renewed with it, so that a bucket of many Envoys is
// planned about twice a renewal period rather than once per Envoy. Only
// a due renewal opens the batch: a plan for a report renews nobody early,
// or a bucket whose Envoys report at their own moments (every report
// period / their number) would renew each at half its renewal period.
func (o Options) renewSlack(r *Reporter) int64 { return int64(o.RenewFor(r) / 2) }

// renewLead is how much before RenewAt a renewal is planned: a shard busy
// with other hubs serves a due hub a little late, and the TTL's margin is
// the only other room for it.
func (o Options) renewLead(r *Reporter) int64 { return int64(o.RenewFor(r) / 8) }

// RenewAt is when r's assignment must be renewed: a renewal period after
// it was sent, or earlier if what is left of its TTL would no longer
// cover a report period, a delivery and the margin (its period was found
// longer since).
func (o Options) RenewAt(r *Reporter) int64 {
	return min(r.LastSend+int64(o.RenewFor(r)), o.renewDeadline(r))
}

// renewDeadline is the latest moment r's renewal may go: what is left of
// its TTL then still covers a cut stream's next report, its delivery and
// the margin. A renewal is planned from RenewAt−renewLead, and may wait
// for a reservation until then.
func (o Options) renewDeadline(r *Reporter) int64 {
	return r.LastSend + int64(r.CurTTL-o.periodOr(r.Period)-o.Delivery-o.Margin)
}

// nextRenewal is the earliest renewal of a live reporter once out's
// changes are sent, or next; a renewal that is due and was held back is
// tried again soon.
func (p *Planner) nextRenewal(out *Output, next int64) int64 {
	now := p.in.Now
	p.sent = resizeBool(p.sent, len(p.in.Reporters))
	for _, c := range out.Changes {
		p.sent[c.R] = true
	}
	for _, i := range p.live {
		r := &p.in.Reporters[i]
		switch {
		case p.sent[i]:
			next = min(next, now+int64(p.O.RenewFor(r)))
		case p.due[i]:
			// Held back for a reservation: planned again when one comes
			// (or room does: retryAt), and at the latest when it cannot
			// wait.
			next = min(next, max(p.O.renewDeadline(r), now+1))
		case r.Sent:
			next = min(next, max(p.O.RenewAt(r)-p.O.renewLead(r), now+1))
		}
	}
	return next
}
