package backoff

import (
	"math"
	"time"
)

// Delay is the wait before retry attempt+1: initial·2^attempt capped at max,
// with jitter drawing uniformly between initial and that value (r in [0,1)).
func Delay(attempt int, initial, max time.Duration, r float64) time.Duration {
	d := float64(initial) * math.Pow(2, float64(attempt))
	if d > float64(max) || math.IsInf(d, 0) {
		d = float64(max)
	}
	d = float64(initial) + r*(d-float64(initial))
	return time.Duration(d)
}
