package engine

import (
	"math"
	"time"
)

// slidingWindow judges the weighted two-window estimate: the previous
// window's count × the share of it still inside the rolling window, plus
// the current window's count. It uses the fixed windows' counters, each
// kept one unit longer so that the next window can read it.
type slidingWindow struct{}

func (slidingWindow) admit(*limitInfo) error { return nil }

func (slidingWindow) key(s *Service, d *descriptorAt, in *limitInfo) string {
	return s.windowKey(d, in, in.m.limit.Unit, d.unix)
}

// appendOps counts in the current window and reads the previous one.
func (slidingWindow) appendOps(s *Service, d *descriptorAt, in *limitInfo, ops []CounterOp) []CounterOp {
	l := in.m.limit
	perSecond := l.Unit == UnitSecond
	ttl := s.ttl(l.Unit) + time.Duration(l.Unit.Seconds())*time.Second
	in.op = len(ops)
	ops = append(ops, Add(in.key, in.hits, ttl).OnSecondLane(perSecond))
	in.prevOp = len(ops)
	prevKey := s.windowKey(d, in, l.Unit, d.unix-l.Unit.Seconds())
	return append(ops, Get(prevKey).OnSecondLane(perSecond))
}

func (slidingWindow) overIfCounted(in *limitInfo, reads []CounterOp, hits uint64, now time.Time) bool {
	w := slidingWeight(reads[in.prevOp].After, now, in.m.limit.Unit.Seconds())
	return reads[in.op].After+hits+w > in.limitN
}

// fill judges a key left alone in stop-increment mode as if its hits had
// been added.
func (slidingWindow) fill(in *limitInfo, ops []CounterOp, wanted []uint64) {
	in.prev = ops[in.prevOp].After
	op := &ops[in.op]
	if wanted != nil && op.Hits == 0 {
		in.before, in.after = op.After, op.After+wanted[in.op]
		return
	}
	fixedWindow{}.fill(in, ops, wanted)
}

func (slidingWindow) counts(in *limitInfo, now time.Time) (before, after uint64) {
	if in.localOver {
		return in.before, in.after
	}
	w := slidingWeight(in.prev, now, in.m.limit.Unit.Seconds())
	return in.before + w, in.after + w
}

// reset, over the limit, is when the estimate is back within it.
func (slidingWindow) reset(in *limitInfo, v verdict, window time.Duration, now time.Time) time.Duration {
	if v == over {
		return slidingClearIn(in.prev, in.after, in.limitN, now, in.m.limit.Unit.Seconds())
	}
	return window
}

func (slidingWindow) cacheTTL(_, reset time.Duration) time.Duration { return reset }

// slidingWeight is the previous window's count × the share of that window
// still inside the rolling window ending now, rounded down.
func slidingWeight(prev uint64, now time.Time, unitSec int64) uint64 {
	unitNs := unitSec * int64(time.Second)
	elapsed := now.UnixNano() - (now.Unix()/unitSec)*unitSec*int64(time.Second)
	if prev == 0 || elapsed >= unitNs {
		return 0
	}
	left := uint64(unitNs - elapsed)
	if prev > math.MaxUint64/left {
		return uint64(float64(prev) * float64(left) / float64(unitNs))
	}
	return prev * left / uint64(unitNs)
}

// slidingClearIn is how long until the estimate, with cur hits in the
// current window, is back within limit (prev decays linearly to 0 at the
// window's end; cur only grows until then).
func slidingClearIn(prev, cur, limit uint64, now time.Time, unitSec int64) time.Duration {
	windowEnd := time.Unix((now.Unix()/unitSec+1)*unitSec, 0)
	untilEnd := windowEnd.Sub(now)
	if cur >= limit || prev == 0 {
		return untilEnd
	}
	// prev × left/unit ≤ limit - cur  ⇔  left ≤ (limit - cur) × unit / prev
	unit := time.Duration(unitSec) * time.Second
	maxLeft := time.Duration(float64(limit-cur) / float64(prev) * float64(unit))
	return max(untilEnd-maxLeft, 0)
}
