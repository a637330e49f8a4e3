package engine

import "time"

// fixedWindow is the reference's algorithm: hits counted per
// epoch-aligned window of the rule's unit, one counter per window.
type fixedWindow struct{}

func (fixedWindow) admit(*limitInfo) error { return nil }

func (fixedWindow) key(s *Service, d *descriptorAt, in *limitInfo) string {
	return s.windowKey(d, in, in.m.limit.Unit, d.unix)
}

func (fixedWindow) appendOps(s *Service, _ *descriptorAt, in *limitInfo, ops []CounterOp) []CounterOp {
	l := in.m.limit
	in.op = len(ops)
	return append(ops, Add(in.key, in.hits, s.ttl(l.Unit)).OnSecondLane(l.Unit == UnitSecond))
}

func (fixedWindow) overIfCounted(in *limitInfo, reads []CounterOp, hits uint64, _ time.Time) bool {
	return reads[in.op].After+hits > in.limitN
}

// fill judges a key sent with 0 hits (stop-increment mode) the reference's
// way: its count is what the counter holds, and before is after - hits in
// unsigned arithmetic, so below 0 it wraps (a stat then counts the key as
// already near or over, as the reference does).
func (fixedWindow) fill(in *limitInfo, ops []CounterOp, wanted []uint64) {
	op := &ops[in.op]
	in.after = op.After
	if wanted != nil {
		in.before = op.After - in.hits
		return
	}
	in.before = op.After - min(op.After, op.Hits)
}

func (fixedWindow) counts(in *limitInfo, _ time.Time) (before, after uint64) {
	return in.before, in.after
}

func (fixedWindow) reset(_ *limitInfo, _ verdict, window time.Duration, _ time.Time) time.Duration {
	return window
}

// cacheTTL: the reference keeps an over-limit key for a whole unit.
func (fixedWindow) cacheTTL(unit, _ time.Duration) time.Duration { return unit }
