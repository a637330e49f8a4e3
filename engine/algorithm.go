package engine

import (
	"fmt"
	"math"
	"time"
)

// Algorithm is how a rule counts. It is sluice's extension to the rule
// model: the reference has fixed windows only (and its strict YAML loader
// rejects the algorithm and burst keys). The zero value is the reference's
// fixed window, byte-identical in keys, TTLs, answers and statistics.
type Algorithm uint8

const (
	// FixedWindow counts hits per epoch-aligned window of the rule's unit.
	FixedWindow Algorithm = iota
	// SlidingWindow judges the weighted two-window estimate: the previous
	// window's count × the share of it still inside the rolling window, plus
	// the current window's count. It uses the fixed windows' counters (kept
	// one unit longer, so the previous one can be read).
	SlidingWindow
	// TokenBucket is GCRA: requests_per_unit tokens come back per unit, up
	// to Burst; one stored timestamp per key.
	TokenBucket
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "token_bucket"}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads a YAML algorithm name; "" is the fixed window.
func ParseAlgorithm(s string) (Algorithm, bool) {
	if s == "" {
		return FixedWindow, true
	}
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), true
		}
	}
	return FixedWindow, false
}

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
	debt := max(int64(op.After)-op.Now, 0)
	if op.Interval <= 0 {
		return 0, op.Hits, uint64(op.Burst)
	}
	used := uint64(ceilDiv(debt, op.Interval))
	return used, used + op.Hits, uint64(op.Burst)
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
