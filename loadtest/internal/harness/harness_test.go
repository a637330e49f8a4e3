package harness

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestSummarize(t *testing.T) {
	in := ms(5, 1, 4, 2, 3)
	s := Summarize(in)
	want := Summary{N: 5, P50: 3 * time.Millisecond, P99: 5 * time.Millisecond, P999: 5 * time.Millisecond, Max: 5 * time.Millisecond}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if in[0] != 5*time.Millisecond {
		t.Error("Summarize sorted its input in place")
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000}, 10},
	}
	for _, tc := range tests {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestGrowthRule(t *testing.T) {
	rule := GrowthRule{Relative: 0.10, Absolute: 5, MinSamples: 6}
	tests := []struct {
		name    string
		samples []float64
		judged  bool
		grew    bool
		first   float64
		last    float64
	}{
		{"too few samples", []float64{1, 2, 3, 4, 5}, false, false, 0, 0},
		{"flat", []float64{100, 100, 100, 100, 100, 100}, true, false, 100, 100},
		{"noise within tolerance", []float64{100, 104, 98, 101, 103, 99, 110, 104, 102}, true, false, 100, 104},
		{"steady climb", []float64{100, 110, 120, 130, 140, 150, 160, 170, 180}, true, true, 110, 170},
		{"one late spike is not growth", []float64{100, 100, 100, 100, 100, 100, 100, 400, 100}, true, false, 100, 100},
		{"early warm-up step then flat", []float64{50, 100, 100, 100, 100, 100, 100, 100, 100}, true, false, 100, 100},
		{"exactly at the limit is not growth", []float64{100, 100, 100, 100, 115, 115}, true, false, 100, 115},
		{"just over the limit grows", []float64{100, 100, 100, 100, 116, 116}, true, true, 100, 116},
		{"shrinking", []float64{200, 190, 180, 170, 160, 150}, true, false, 195, 155},
		// 7 samples: thirds of 2, the first third takes the extra one.
		{"uneven count", []float64{10, 10, 10, 50, 50, 50, 50}, true, true, 10, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := rule.Check(tc.samples)
			if g.Judged != tc.judged || g.Grew != tc.grew {
				t.Fatalf("Check(%v) = %+v, want judged=%v grew=%v", tc.samples, g, tc.judged, tc.grew)
			}
			if tc.judged && (g.FirstMedian != tc.first || g.LastMedian != tc.last) {
				t.Errorf("medians = %v, %v; want %v, %v", g.FirstMedian, g.LastMedian, tc.first, tc.last)
			}
		})
	}
}

func TestGrowthRuleValidate(t *testing.T) {
	tests := []struct {
		rule GrowthRule
		ok   bool
	}{
		{GrowthRule{Relative: 0.2, Absolute: 1, MinSamples: 3}, true},
		{GrowthRule{MinSamples: 6}, true},
		{GrowthRule{Relative: -0.1, MinSamples: 6}, false},
		{GrowthRule{Absolute: -1, MinSamples: 6}, false},
		{GrowthRule{Relative: math.NaN(), MinSamples: 6}, false},
		{GrowthRule{MinSamples: 2}, false},
	}
	for _, tc := range tests {
		if err := tc.rule.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.rule, err, tc.ok)
		}
	}
}

func TestParseGoroutineTotal(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"goroutine profile: total 42\n", 42, true},
		{"goroutine profile: total 7", 7, true},
		{"goroutine profile: total 0\r\n", 0, true},
		{"goroutine profile: total \n", 0, false},
		{"goroutine profile: total -3\n", 0, false},
		{"goroutine profile: total 12abc\n", 0, false},
		{"<html>404 page not found</html>", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseGoroutineTotal(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseGoroutineTotal(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseGoroutineTotal(f *testing.F) {
	for _, s := range []string{"goroutine profile: total 1\n", "goroutine profile: total 99999999999999999999", "goroutine profile: total", "total 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseGoroutineTotal(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseGoroutineTotal(%q) = %d without error", s, n)
		}
	})
}

func TestRunLoadBounds(t *testing.T) {
	tests := []struct {
		name      string
		cfg       LoadConfig
		cancel    bool
		wantCalls int // exact when > 0
	}{
		{"stops at the call count", LoadConfig{Callers: 4, Duration: time.Minute, MaxCallsPerCaller: 25}, false, 100},
		{"stops on cancel", LoadConfig{Callers: 3, Duration: time.Minute, MaxCallsPerCaller: 1 << 30}, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var made, afterCancel atomic.Int64
			var cancelled atomic.Bool
			call := func(_ context.Context, caller int) (bool, error) {
				// Calls that start once cancel has returned: a caller may
				// have passed its context check just before, so each may make
				// one, and no more. (Counting against the 1000th call instead
				// raced: others run between its count and its cancel.)
				if cancelled.Load() {
					afterCancel.Add(1)
				}
				n := made.Add(1)
				if tc.cancel && n == 1000 {
					cancel()
					cancelled.Store(true)
				}
				switch n % 3 {
				case 0:
					return false, status.Error(codes.Unavailable, "down")
				case 1:
					return true, nil
				}
				return false, errors.New("plain")
			}
			rec := NewRecorder(tc.cfg.Callers)
			if err := RunLoad(ctx, tc.cfg, call, rec.Record); err != nil {
				t.Fatal(err)
			}
			calls := rec.Calls()
			if len(calls) != int(made.Load()) {
				t.Fatalf("recorded %d calls, made %d", len(calls), made.Load())
			}
			if tc.wantCalls > 0 && len(calls) != tc.wantCalls {
				t.Fatalf("recorded %d calls, want %d", len(calls), tc.wantCalls)
			}
			if tc.cancel && (len(calls) < 1000 || afterCancel.Load() > int64(tc.cfg.Callers)) {
				t.Fatalf("%d calls, %d of them started after cancel, with %d callers", len(calls), afterCancel.Load(), tc.cfg.Callers)
			}
			var over, unavailable, unknown int
			for i, c := range calls {
				if i > 0 && c.Start.Before(calls[i-1].Start) {
					t.Fatal("calls not ordered by start")
				}
				switch {
				case c.Code == codes.OK && c.Over:
					over++
				case c.Code == codes.Unavailable && !c.Over:
					unavailable++
				case c.Code == codes.Unknown && !c.Over:
					unknown++
				default:
					t.Fatalf("unexpected call %+v", c)
				}
			}
			if over == 0 || unavailable == 0 || unknown == 0 {
				t.Errorf("over=%d unavailable=%d unknown=%d, want all three kinds", over, unavailable, unknown)
			}
			first := rec.FirstErrors()
			if first[codes.Unavailable] != "rpc error: code = Unavailable desc = down" || first[codes.Unknown] != "plain" {
				t.Errorf("first errors = %v", first)
			}
		})
	}
}

func TestLoadConfigValidate(t *testing.T) {
	tests := []struct {
		cfg LoadConfig
		ok  bool
	}{
		{LoadConfig{Callers: 1, Duration: time.Second, MaxCallsPerCaller: 1}, true},
		{LoadConfig{Callers: 0, Duration: time.Second, MaxCallsPerCaller: 1}, false},
		{LoadConfig{Callers: 1, Duration: 0, MaxCallsPerCaller: 1}, false},
		{LoadConfig{Callers: 1, Duration: time.Second, MaxCallsPerCaller: 0}, false},
		{LoadConfig{Callers: 1, Duration: time.Second, MaxCallsPerCaller: 1, Pause: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestCodeCounts(t *testing.T) {
	tests := []struct {
		in   map[codes.Code]int
		want string
	}{
		{nil, "(none)"},
		{map[codes.Code]int{codes.OK: 5}, "OK=5"},
		{map[codes.Code]int{codes.Unavailable: 3, codes.OK: 1, codes.DeadlineExceeded: 2}, "OK=1 DeadlineExceeded=2 Unavailable=3"},
	}
	for _, tc := range tests {
		if got := CodeCounts(tc.in); got != tc.want {
			t.Errorf("CodeCounts(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
