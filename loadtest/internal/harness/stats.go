package harness

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"google.golang.org/grpc/codes"
)

// Summary describes a set of latencies.
type Summary struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

func (s Summary) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s p99.9=%s max=%s", s.N,
		s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond),
		s.P999.Round(time.Microsecond), s.Max.Round(time.Microsecond))
}

// Summarize sorts a copy of lat and reads its percentiles (nearest rank,
// testenv.Percentile).
func Summarize(lat []time.Duration) Summary {
	s := slices.Clone(lat)
	slices.Sort(s)
	out := Summary{N: len(s), P50: testenv.Percentile(s, 0.50), P99: testenv.Percentile(s, 0.99), P999: testenv.Percentile(s, 0.999)}
	if len(s) > 0 {
		out.Max = s[len(s)-1]
	}
	return out
}

// Median of values (mean of the middle two for an even count); NaN when empty.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// GrowthRule judges a series of samples taken at a fixed interval (RSS or
// goroutines of a server under steady load) for sustained growth.
//
// The series is cut in thirds (the first third gets the extra samples when
// the count is not a multiple of three); the series grew when the median of
// the last third exceeds the median of the first third by more than
// Relative of it plus Absolute:
//
//	grew := median(last) > median(first)*(1+Relative) + Absolute
//
// Medians ignore a single spike (a GC cycle, a burst of connections), and
// comparing the ends of the run rather than fitting a slope tolerates the
// step a warm cache makes early on. With fewer than MinSamples samples
// nothing is judged.
type GrowthRule struct {
	Relative   float64
	Absolute   float64
	MinSamples int
}

// Validate reports the first setting that cannot work.
func (g GrowthRule) Validate() error {
	switch {
	case g.Relative < 0 || math.IsNaN(g.Relative):
		return errors.New("harness: GrowthRule.Relative must be >= 0")
	case g.Absolute < 0 || math.IsNaN(g.Absolute):
		return errors.New("harness: GrowthRule.Absolute must be >= 0")
	case g.MinSamples < 3:
		return fmt.Errorf("harness: GrowthRule.MinSamples must be at least 3, got %d", g.MinSamples)
	}
	return nil
}

// Growth is a GrowthRule's verdict on one series.
type Growth struct {
	Judged      bool // enough samples to judge
	Grew        bool
	FirstMedian float64
	LastMedian  float64
	Limit       float64 // the largest last-third median that is not growth
}

// Check judges samples.
func (g GrowthRule) Check(samples []float64) Growth {
	n := len(samples)
	if n < g.MinSamples || n < 3 {
		return Growth{}
	}
	third := n / 3
	first := samples[:n-2*third]
	last := samples[n-third:]
	v := Growth{Judged: true, FirstMedian: Median(first), LastMedian: Median(last)}
	v.Limit = v.FirstMedian*(1+g.Relative) + g.Absolute
	v.Grew = v.LastMedian > v.Limit
	return v
}

// CodeCounts prints calls by gRPC code, "Unavailable=3 DeadlineExceeded=1",
// in code order; "(none)" for no calls.
func CodeCounts(m map[codes.Code]int) string {
	if len(m) == 0 {
		return "(none)"
	}
	keys := make([]codes.Code, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
