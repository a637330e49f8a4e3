package engine

import (
	"fmt"
	"time"
)

// QuotaRule is the rule of one descriptor, for a caller that hands shares
// of its limit to others who decide by themselves (the Rate Limit Quota
// Service's Envoys) and counts what it hands out on the very counters an
// RLS decision for the same descriptor counts on. It is bound to the
// config it was looked up in: after a reload, look it up again.
type QuotaRule struct {
	// Limit is the matched rule; nil when the descriptor matches none.
	Limit *RateLimit
	// Stats are the rule's counters as a decision for the descriptor
	// counts them (per request when detailed_metric or value_to_metric
	// make them so).
	Stats RuleStats

	svc     *Service
	domain  string
	entries []Entry
	shared  []string
}

// QuotaRule looks up the rule of the descriptor entries in domain in the
// current config. domainFound is false when the domain is not configured.
// The error names a descriptor whose cache keys the store cannot hold.
func (s *Service) QuotaRule(domain string, entries []Entry) (r QuotaRule, domainFound bool, err error) {
	cfg := s.cfg.Load()
	if cfg == nil {
		return QuotaRule{}, false, nil
	}
	m, found := cfg.getLimit(domain, &Descriptor{Entries: entries})
	if m.limit == nil {
		return QuotaRule{}, found, nil
	}
	r = QuotaRule{Limit: m.limit, Stats: m.limit.Stats, svc: s, domain: domain, entries: entries, shared: m.sharedValues}
	if m.stats != nil {
		r.Stats = *m.stats
	}
	if v := s.o.KeyValidator; v != nil && !m.limit.Unlimited {
		if err := v.ValidateKey(r.WindowKey(time.Now())); err != nil {
			return QuotaRule{}, true, fmt.Errorf("descriptor %v of domain %q: %w", entries, domain, err)
		}
	}
	return r, true, nil
}

// Window is the start and the length of the counting window of a window
// rule (fixed or sliding) that holds t; length is 0 for token buckets and
// unlimited rules, which have no windows.
func (r QuotaRule) Window(t time.Time) (start time.Time, length time.Duration) {
	if r.Limit == nil || r.Limit.Unlimited || r.Limit.Algorithm == TokenBucket {
		return time.Time{}, 0
	}
	div := r.Limit.Unit.Seconds()
	if div <= 0 {
		return time.Time{}, 0
	}
	u := t.Unix()
	return time.Unix((u/div)*div, 0), time.Duration(div) * time.Second
}

// WindowKey is the cache key of the window (or token bucket) that holds t:
// byte for byte the key a decision for the descriptor counts on then.
func (r QuotaRule) WindowKey(t time.Time) string {
	unit := r.Limit.Unit
	if r.Limit.Algorithm == TokenBucket {
		unit = 0
	}
	return r.svc.cacheKey(r.domain, r.entries, r.shared, unit, t.Unix())
}

// ReserveOp is the operation that adds hits to the counter of the window
// holding t, atomically, keeping the counter until that window ends (as
// a decision's add would, however far ahead the window is). Its After,
// once applied, is the counter's value right after the add.
func (r QuotaRule) ReserveOp(t time.Time, hits uint64, now time.Time) CounterOp {
	start, length := r.Window(t)
	ttl := start.Add(length).Sub(now) + r.svc.ttl(r.Limit.Unit) - length
	ttl = time.Duration(CeilSeconds(max(ttl, time.Second))) * time.Second
	return Reserve(r.WindowKey(t), hits, ttl).OnSecondLane(r.Limit.Unit == UnitSecond)
}

// ReleaseOp takes hits back from the counter of the window holding t (never
// below 0; a counter that expired stays missing).
func (r QuotaRule) ReleaseOp(t time.Time, hits uint64) CounterOp {
	return Release(r.WindowKey(t), hits).OnSecondLane(r.Limit.Unit == UnitSecond)
}

// TakeOp takes up to hits tokens from a token-bucket rule's bucket at now
// (as many as it holds); After, once applied, is the bucket's state before
// the step (TokenBucketTake tells what was taken).
func (r QuotaRule) TakeOp(hits uint64, now time.Time) CounterOp {
	l := r.Limit
	interval := bucketInterval(l.RequestsPerUnit, l.Unit)
	b := Bucket{Now: now.UnixMicro(), Interval: interval, Burst: bucketBurst(l, l.RequestsPerUnit, interval)}
	return BucketTake(r.WindowKey(now), hits, b).OnSecondLane(l.Unit == UnitSecond)
}

// Granted is what a reservation of op.Hits got once applied: the hits at or
// below limit (the counts right below op.After), and the excess it counted
// beyond the limit, which the caller should give back.
func Granted(op *CounterOp, limit uint64) (granted, excess uint64) {
	before := op.After - min(op.After, op.Hits)
	if before >= limit {
		return 0, op.After - before
	}
	granted = min(op.Hits, limit-before)
	return granted, op.Hits - granted
}
