package alloc_test

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

func known(rates ...float64) []alloc.Claim {
	cs := make([]alloc.Claim, len(rates))
	for i, r := range rates {
		cs[i] = alloc.Claim{Rate: r, Known: true}
	}
	return cs
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestDivide(t *testing.T) {
	t.Parallel()
	noFloor := alloc.DefaultOptions()
	noFloor.Floor = 0
	keep := noFloor
	keep.Spare = 0
	half := noFloor
	half.Spare = 0.5
	cases := []struct {
		name   string
		limit  float64
		claims []alloc.Claim
		o      alloc.Options
		want   []float64
	}{
		{"nobody", 100, nil, noFloor, []float64{}},
		{"one takes all it asks, spare on top", 100, known(30), noFloor, []float64{100}},
		{"one, spare kept", 100, known(30), keep, []float64{30}},
		{"one, half the spare", 100, known(30), half, []float64{65}},
		{"even demand above the limit", 90, known(100, 100, 100), noFloor, []float64{30, 30, 30}},
		{"a small claim's rest goes to the others", 100, known(10, 200, 200), noFloor, []float64{10, 45, 45}},
		{"two levels", 100, known(5, 20, 1000, 1000), noFloor, []float64{5, 20, 37.5, 37.5}},
		{"claims exactly the limit", 100, known(40, 60), keep, []float64{40, 60}},
		{"below the limit: spare split evenly", 100, known(10, 30), noFloor, []float64{40, 60}},
		{"unknown claims the equal share", 100, []alloc.Claim{{}, {Rate: 500, Known: true}}, noFloor, []float64{50, 50}},
		{"unknown newcomer under a small demand", 100, []alloc.Claim{{}, {Rate: 20, Known: true}}, keep, []float64{50, 20}},
		{"floor for the idle", 100, known(0, 1000), alloc.DefaultOptions(), []float64{5, 95}},
		{"floor met by demand", 100, known(7, 1000), alloc.DefaultOptions(), []float64{7, 93}},
		{"zero limit", 0, known(10, 10), noFloor, []float64{0, 0}},
		{"negative limit", -5, known(10), noFloor, []float64{0}},
		{"NaN limit", math.NaN(), known(10), noFloor, []float64{0}},
		{"bad demands count as none", 100, known(math.NaN(), -3, 1000), keep, []float64{0, 0, 100}},
		{"infinite demand", 100, known(math.Inf(1), 10), keep, []float64{90, 10}},
		{"unvalidated spare above 1 is 1", 100, known(10, 30), alloc.Options{Spare: 7}, []float64{40, 60}},
		{"unvalidated floor above 1 is 1", 100, known(0, 1000), alloc.Options{Floor: 3}, []float64{50, 50}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := alloc.Divide(c.limit, c.claims, c.o, nil)
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if !near(got[i], c.want[i]) {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestDivideReusesOut(t *testing.T) {
	t.Parallel()
	buf := make([]float64, 1, 8)
	got := alloc.Divide(90, known(100, 100, 100), alloc.DefaultOptions(), buf)
	if &got[0] != &buf[0] || len(got) != 3 {
		t.Fatalf("out not reused: %v", got)
	}
}

func TestRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		allowed, denied    uint64
		reported, observed time.Duration
		want               alloc.Claim
	}{
		{"subscription", 1, 0, 0, 0, alloc.Claim{}},
		{"allowed and denied over the interval", 300, 200, 5 * time.Second, 5 * time.Second, alloc.Claim{Rate: 100, Known: true}},
		{"Envoy truncated 1.9 s to 1 s", 190, 0, time.Second, 1900 * time.Millisecond, alloc.Claim{Rate: 100, Known: true}},
		{"sub-second interval reported as 0 s", 50, 0, 0, 500 * time.Millisecond, alloc.Claim{Rate: 100, Known: true}},
		{"bunched in transit", 100, 0, time.Second, time.Millisecond, alloc.Claim{Rate: 100, Known: true}},
		{"too short to tell", 100, 0, 0, 50 * time.Millisecond, alloc.Claim{}},
		{"idle", 0, 0, time.Second, time.Second, alloc.Claim{Known: true}},
		{"huge counts stay finite", math.MaxUint64, math.MaxUint64, time.Second, 0, alloc.Claim{Rate: 1e15, Known: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := alloc.Rate(c.allowed, c.denied, c.reported, c.observed)
			if got.Known != c.want.Known || !near(got.Rate, c.want.Rate) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// fairLevel is the max-min fair level of demands under limit, found by
// bisection (not by Divide's water-filling): the λ at which
// Σ min(d, λ) = limit, or +Inf when the demands fit.
func fairLevel(limit float64, demands []float64) float64 {
	total := func(l float64) float64 {
		s := 0.0
		for _, d := range demands {
			s += math.Min(d, l)
		}
		return s
	}
	hi := 0.0
	for _, d := range demands {
		hi = math.Max(hi, d)
	}
	if total(hi) <= limit {
		return math.Inf(1)
	}
	lo := 0.0
	for range 200 {
		mid := (lo + hi) / 2
		if total(mid) < limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// FuzzDivide checks the allocation's invariants on any limit, options and
// claims (NaN, infinities and negatives included), and that the strategies
// made of the shares admit no more than the shares.
func FuzzDivide(f *testing.F) {
	f.Add(1000.0, uint8(25), uint8(255), []byte{1, 0, 0, 0, 0, 0, 0x40, 0x9f, 0x40})
	f.Add(100.0, uint8(0), uint8(255), []byte{1, 0, 0, 0, 0, 0, 0, 0x24, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(0.5, uint8(0), uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f})
	f.Add(3e14, uint8(255), uint8(128), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xef, 0x7f, 1, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Fuzz(func(t *testing.T, limit float64, floor, spare uint8, data []byte) {
		o := alloc.DefaultOptions()
		o.Floor, o.Spare = float64(floor)/255, float64(spare)/255
		var claims []alloc.Claim
		for len(data) >= 9 && len(claims) < 64 {
			claims = append(claims, alloc.Claim{Known: data[0]&1 == 1, Rate: math.Float64frombits(binary.LittleEndian.Uint64(data[1:9]))})
			data = data[9:]
		}
		shares := alloc.Divide(limit, claims, o, nil)
		checkDivide(t, limit, claims, o, shares)
	})
}

func checkDivide(t *testing.T, limit float64, claims []alloc.Claim, o alloc.Options, shares []float64) {
	t.Helper()
	if len(shares) != len(claims) {
		t.Fatalf("%d shares for %d claims", len(shares), len(claims))
	}
	if !(limit > 0) || len(claims) == 0 {
		for _, s := range shares {
			if s != 0 {
				t.Fatalf("limit %v gave %v", limit, shares)
			}
		}
		return
	}
	limit = math.Min(limit, 1e15)
	n := float64(len(claims))
	// The claims as documented: demand (0 if not a number ≥ 0, at most
	// 1e15) or the equal share if unknown, at least Floor of it.
	want := make([]float64, len(claims))
	sumClaims := 0.0
	for i, c := range claims {
		r := limit / n
		if c.Known {
			r = c.Rate
			if !(r >= 0) {
				r = 0
			}
			r = math.Min(r, 1e15)
		}
		want[i] = math.Max(r, o.Floor*limit/n)
		sumClaims += want[i]
	}
	eps := 1e-9 * limit
	sum := 0.0
	for _, s := range shares {
		if !(s >= 0) || math.IsInf(s, 0) {
			t.Fatalf("share %v in %v", s, shares)
		}
		sum += s
	}
	if sum > limit+eps {
		t.Fatalf("shares add up to %v, above the limit %v", sum, limit)
	}
	if sum < math.Min(limit, sumClaims)-eps {
		t.Fatalf("shares add up to %v, below min(limit %v, claims %v)", sum, limit, sumClaims)
	}
	spare := o.Spare * math.Max(0, limit-sumClaims) / n
	for i, s := range shares {
		if s > want[i]+spare+eps {
			t.Fatalf("share %d is %v, above its claim %v plus the spare %v", i, s, want[i], spare)
		}
		if s < want[i]-eps { // short of its claim: it must have the most
			for j, sj := range shares {
				if sj > s+eps {
					t.Fatalf("share %d (%v, claim %v) is short of its claim, yet share %d is %v", i, s, want[i], j, sj)
				}
			}
		}
		checkAssign(t, alloc.Plan{Kind: alloc.PlanDivide, Limit: limit}, s, o)
	}
}

func checkAssign(t *testing.T, p alloc.Plan, share float64, o alloc.Options) {
	t.Helper()
	s, ok := p.Assign(share, o)
	if !ok {
		t.Fatalf("no strategy for share %v", share)
	}
	if s.Rate() > share*(1+1e-12) {
		t.Fatalf("strategy %+v admits %v/s, above the share %v", s, s.Rate(), share)
	}
	if s.Kind == alloc.TokenBucket && (s.MaxTokens < 1 || s.TokensPerFill < 1 || s.FillInterval < time.Second || s.FillInterval%time.Second != 0) {
		t.Fatalf("strategy %+v for share %v is not one Envoy enforces as meant", s, share)
	}
}
