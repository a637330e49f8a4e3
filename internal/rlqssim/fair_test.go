package rlqssim

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFairShares(t *testing.T) {
	light := 300.0 / 7
	for _, c := range []struct {
		name    string
		limit   float64
		demands []float64
		want    []float64
	}{
		{"70/20/10 of 3000 over 1000", 1000, []float64{2100, 150, 150, light, light, light, light, light, light, light},
			[]float64{400, 150, 150, light, light, light, light, light, light, light}},
		{"all below: each its demand", 1000, []float64{100, 200}, []float64{100, 200}},
		{"equal split", 90, []float64{100, 100, 100}, []float64{30, 30, 30}},
		{"idle gets nothing", 100, []float64{0, 500, 20}, []float64{0, 80, 20}},
		{"zero limit", 0, []float64{5}, []float64{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := FairShares(c.limit, c.demands)
			for i := range c.want {
				if math.Abs(got[i]-c.want[i]) > 1e-9 {
					t.Fatalf("shares %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestJudge(t *testing.T) {
	// Two Envoys, 1 s windows, demand 900 and 300 against 1000: fair
	// shares 700 and 300. Envoy 0 idles at 10 s.
	demand := func(e int, t time.Duration) float64 {
		switch {
		case e == 0 && t < 10*time.Second:
			return 900
		case e == 1:
			return 300
		}
		return 0
	}
	good := func() [][]uint64 {
		rows := [][]uint64{make([]uint64, 20), make([]uint64, 20)}
		for s := range 20 {
			if s < 10 {
				rows[0][s], rows[1][s] = 700, 290
			} else {
				rows[1][s] = 300
			}
		}
		return rows
	}
	c := Criteria{Limit: 1000, Settle: 2 * time.Second, MinFleet: 0.95, MinShare: 0.9}
	v := Judge(c, good(), nil, 0, demand, nil)
	// Judged: seconds 2..9 and 12..19 (the start and the idle settle).
	if !v.OK() || v.Judged != 16 || v.FleetMin != 300 || v.FleetMax != 990 || v.Windows != 20 {
		t.Fatalf("a good run: %+v, want 16 seconds judged of 20 windows, fleet 300..990, no failure", v)
	}
	for _, c2 := range []struct {
		name   string
		break_ func(rows [][]uint64)
		want   string
	}{
		{"over the limit", func(r [][]uint64) { r[0][5] = 711 }, "over the limit"},
		{"over the limit while settling", func(r [][]uint64) { r[0][0] = 711 }, "over the limit"},
		{"fleet too low", func(r [][]uint64) { r[0][5] = 640 }, "under 950.0"},
		{"unfair to the light one", func(r [][]uint64) {
			for s := 2; s < 10; s++ {
				r[1][s] = 260
			}
		}, "Envoy 1 admitted 260"},
		{"idle share not moved", func(r [][]uint64) {
			for s := 12; s < 20; s++ {
				r[1][s] = 260
			}
		}, "Envoy 1 admitted 260"},
	} {
		rows := good()
		c2.break_(rows)
		v := Judge(c, rows, nil, 0, demand, nil)
		if v.OK() || !strings.Contains(strings.Join(v.Failures, "\n"), c2.want) {
			t.Errorf("%s: verdict %+v, want a failure saying %q", c2.name, v, c2.want)
		}
	}
	// A second in the settle time, or after a fault, is not judged for use,
	// however low.
	rows := good()
	rows[1][11] = 0
	rows[1][15] = 0
	c.FaultSettle = 2 * time.Second
	if v := Judge(c, rows, nil, 0, demand, []time.Duration{14 * time.Second}); !v.OK() {
		t.Errorf("a second within Settle of a change, or of a fault, was judged: %v", v.Failures)
	}
	// The mean use: the good run's is (8×990/1000 + 8×300/300)/16.
	if v := Judge(c, good(), nil, 0, demand, nil); math.Abs(v.Use-0.995) > 1e-9 {
		t.Errorf("use %v, want 0.995", v.Use)
	}
	mean := c
	mean.MinMean, mean.MinFleet = 0.99, 0.5
	rows = good()
	for s := 2; s < 10; s++ {
		rows[0][s] = 600 // 890 of 1,000: above MinFleet, under the mean
	}
	if v := Judge(mean, rows, nil, 0, demand, nil); v.OK() || !strings.Contains(strings.Join(v.Failures, "\n"), "on average") {
		t.Errorf("a mean use of 0.945 under MinMean 0.99 passed: %+v", v)
	}
	// A last second cut short by the run's end (Until) is checked for the
	// limit, not judged for use.
	rows = good()
	rows[1][19] = 100
	cut := c
	cut.Until = 19 * time.Second
	if v := Judge(cut, rows, nil, 0, demand, nil); !v.OK() || v.Judged != 15 {
		t.Errorf("the second past Until: %+v, want it not judged (15 seconds)", v)
	}
	rows[0][19] = 1000
	if v := Judge(cut, rows, nil, 0, demand, nil); v.Over != 1 {
		t.Errorf("the second past Until not checked against the limit: %+v", v)
	}
	// After OverUntil the limit is not checked (Envoys on their own
	// fallback), before it still is.
	over := cut
	over.OverUntil = 18 * time.Second
	if v := Judge(over, rows, nil, 0, demand, nil); v.Over != 0 || v.Windows != 18 {
		t.Errorf("a window past OverUntil checked: %+v, want 18 windows and none over", v)
	}
	rows[0][17] = 1000
	if v := Judge(over, rows, nil, 0, demand, nil); v.Over != 1 {
		t.Errorf("the window ending at OverUntil not checked: %+v", v)
	}
	// RLS callers on the same counter count in every window.
	if v := Judge(c, good(), []uint64{0, 0, 0, 0, 0, 11}, 100, demand, nil); v.Over != 1 {
		t.Errorf("RLS callers' admissions not counted: %+v", v)
	}
}
