package engine

import (
	"fmt"
	"time"
)

// tokenBucket is GCRA: requests_per_unit tokens come back per unit, up to
// the burst; one stored timestamp per key.
type tokenBucket struct{}

// admit refuses more tokens than the bucket holds: they can never be
// admitted, and an OVER_LIMIT with a retry time would have the client
// retry forever. (A bucket of 0, requests_per_unit 0, refuses everything
// on purpose and stays an OVER_LIMIT.)
func (tokenBucket) admit(in *limitInfo) error {
	l := in.m.limit
	burst := bucketBurst(l, l.RequestsPerUnit, bucketInterval(l.RequestsPerUnit, l.Unit))
	if burst > 0 && in.hits > uint64(burst) {
		return invalidRequest(fmt.Sprintf("hits_addend %d is more than the burst %d of token bucket rule '%s': it can never be admitted", in.hits, burst, l.FullKey))
	}
	return nil
}

// key: a bucket has no window, so one key serves it for all time.
func (tokenBucket) key(s *Service, d *descriptorAt, in *limitInfo) string {
	return s.windowKey(d, in, 0, 0)
}

func (tokenBucket) appendOps(_ *Service, d *descriptorAt, in *limitInfo, ops []CounterOp) []CounterOp {
	l := in.m.limit
	interval := bucketInterval(l.RequestsPerUnit, l.Unit)
	burst := bucketBurst(l, l.RequestsPerUnit, interval)
	in.limitN = uint64(burst)
	in.op = len(ops)
	b := Bucket{Now: d.now.UnixMicro(), Interval: interval, Burst: burst}
	return append(ops, BucketStep(in.key, in.hits, b).OnSecondLane(l.Unit == UnitSecond))
}

func (tokenBucket) overIfCounted(in *limitInfo, reads []CounterOp, hits uint64, _ time.Time) bool {
	op := reads[in.op]
	op.Hits = hits
	_, after, limit := bucketUsage(&op)
	return after > limit
}

// fill judges a step left alone in stop-increment mode as if its hits had
// been asked for.
func (tokenBucket) fill(in *limitInfo, ops []CounterOp, wanted []uint64) {
	op := ops[in.op]
	if wanted != nil && op.Hits == 0 {
		op.Hits = wanted[in.op]
	}
	in.bucket = op
	in.before, in.after, in.limitN = bucketUsage(&op)
}

func (tokenBucket) counts(in *limitInfo, _ time.Time) (before, after uint64) {
	return in.before, in.after
}

// reset is when the bucket holds one more token (within), this request's
// tokens (over), or one token's time when the local cache refused it.
func (tokenBucket) reset(in *limitInfo, v verdict, _ time.Duration, _ time.Time) time.Duration {
	l := in.m.limit
	op := &in.bucket
	b := &op.Bucket
	switch v {
	case localOver:
		return time.Duration(bucketInterval(l.RequestsPerUnit, l.Unit)) * time.Microsecond
	case over:
		need := max(int64(op.After), b.Now) + int64(min(in.hits, uint64(b.Burst)+1))*b.Interval - b.Now - b.Burst*b.Interval
		return time.Duration(max(need, 1)) * time.Microsecond
	}
	tat, _ := TokenBucketStep(int64(op.After), op)
	return bucketWait(tat, b.Now, b.Interval)
}

func (tokenBucket) cacheTTL(_, reset time.Duration) time.Duration { return reset }

// tokenBucketSuffix ends a token bucket's cache key instead of the window
// start (a bucket has no window), so it never collides with a counter.
const tokenBucketSuffix = "tb"

// bucketInterval is the time one token takes to come back, in microseconds
// (at least 1: rates above a million per second per key are capped there).
func bucketInterval(rpu uint32, unit Unit) int64 {
	us := unit.Seconds() * 1e6
	if rpu == 0 {
		return max(us, 1) // its burst is 0: nothing is admitted anyway
	}
	return max((us+int64(rpu)-1)/int64(rpu), 1)
}

// maxBucketSpan bounds Burst × Interval (microseconds, about 142 years), so
// that a TAT stays exact in the Redis script's doubles (2^53).
const maxBucketSpan = 1 << 52

// bucketBurst is the capacity: the rule's burst, or requests_per_unit (0
// when requests_per_unit is 0: nothing is admitted), capped by maxBucketSpan.
func bucketBurst(l *RateLimit, rpu uint32, interval int64) int64 {
	if rpu == 0 {
		return 0
	}
	b := int64(rpu)
	if l.Burst > 0 {
		b = int64(l.Burst)
	}
	return min(b, maxBucketSpan/interval)
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// bucketUsage turns a step's found TAT into the numbers the fixed-window
// arithmetic judges: tokens in use before and after the step (the hits
// added, whether or not the bucket took them), and the burst as the limit.
// A step is refused exactly when after > limit, as in TokenBucketStep.
func bucketUsage(op *CounterOp) (before, after, limit uint64) {
	b := &op.Bucket
	debt := max(int64(op.After)-b.Now, 0)
	if b.Interval <= 0 {
		return 0, op.Hits, uint64(b.Burst)
	}
	used := uint64(ceilDiv(debt, b.Interval))
	return used, used + op.Hits, uint64(b.Burst)
}

// bucketWait is the time until the bucket holds one more token than now
// (0 when it is full), given the TAT after the step.
func bucketWait(tat, now, interval int64) time.Duration {
	debt := max(tat-now, 0)
	if debt == 0 || interval <= 0 {
		return 0
	}
	rem := debt % interval
	if rem == 0 {
		rem = interval
	}
	return time.Duration(rem) * time.Microsecond
}
