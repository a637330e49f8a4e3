package server

import "testing"

func TestMaxInFlight(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		configured, conns, shards, want int
	}{
		{"configured wins", 3, 10, 2, 3},
		{"pool shared out, capped", 0, 10, 2, defaultInFlight},
		{"small pool shared out", 0, 4, 4, 1},
		{"at least one", 0, 2, 4, 1},
		{"inline store", 0, 0, 8, 1},
	} {
		if got := maxInFlight(tc.configured, tc.conns, tc.shards); got != tc.want {
			t.Errorf("%s: maxInFlight(%d, %d, %d) = %d, want %d", tc.name, tc.configured, tc.conns, tc.shards, got, tc.want)
		}
	}
}
