package engine_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestCeilSeconds: expiries and reset headers round up, so a counter never
// expires before its window and a client is never told to retry too early.
func TestCeilSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2},
		{time.Minute, 60},
		{30*24*time.Hour + time.Millisecond, 30*24*60*60 + 1},
	} {
		if got := engine.CeilSeconds(tc.d); got != tc.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
