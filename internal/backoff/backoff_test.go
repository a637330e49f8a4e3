package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const s = time.Second
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0, s}, {0, 0.99, s}, // the first wait is the initial interval
		{1, 0, s}, {1, 1, 2 * s}, {1, 0.5, 1500 * time.Millisecond},
		{3, 1, 8 * s}, {10, 1, 30 * s}, {10, 0, s}, {5000, 1, 30 * s}, // capped, no overflow
	}
	for _, tc := range tests {
		if got := Delay(tc.attempt, s, 30*s, tc.r); got != tc.want {
			t.Errorf("Delay(%d, r=%v) = %v, want %v", tc.attempt, tc.r, got, tc.want)
		}
	}
}
