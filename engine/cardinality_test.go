package engine_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
)

// heapAfterGC is the live heap once garbage is gone.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rulesConfig is a configuration of n rules whose keys change with gen, plus
// a detailed_metric rule whose stats are named by the request.
func rulesConfig(gen, n int) []engine.ConfigFile {
	d := &engine.DomainConfig{Domain: "rules"}
	for i := 0; i < n; i++ {
		d.Descriptors = append(d.Descriptors, engine.DescriptorConfig{Key: "k", Value: fmt.Sprintf("g%d_r%d", gen, i),
			RateLimit: &engine.RateLimitConfig{RequestsPerUnit: 10, Unit: "minute"}})
	}
	d.Descriptors = append(d.Descriptors, engine.DescriptorConfig{Key: "user", DetailedMetric: true,
		RateLimit: &engine.RateLimitConfig{RequestsPerUnit: 10, Unit: "minute"}})
	return []engine.ConfigFile{{Name: "rules.yaml", Domain: d}}
}

// Statistics cannot grow without bound: not with any number of unknown
// domains or request-named keys (any caller can send those), nor with reloads
// that replace every rule. A sink's flush (here: Sweep) releases what is gone.
func TestStatsHeapStaysFlat(t *testing.T) {
	domains, reloads, rules := 100_000, 100, 50_000
	if raceEnabled || testing.Short() {
		// Same shape, smaller: the race detector makes each load ~10x slower.
		domains, reloads, rules = 100_000, 10, 5_000
	}
	f := newFixture(t, nil)
	st := f.stats
	flush := func() { st.Sweep(); st.Sweep() }
	load := func(gen int) {
		t.Helper()
		cfg, err := f.svc.LoadConfig(rulesConfig(gen, rules), false)
		if err != nil {
			t.Fatal(err)
		}
		f.svc.SetConfig(cfg)
	}
	load(0)
	f.do(t, req("rules", kv("k", "g0_r1")))
	f.do(t, req("rules", kv("user", "u0")))
	flush()
	base := heapAfterGC()

	// Unknown domains, one in a hundred 64 KiB long: kept as stats for
	// good, they would take ~70 MB here.
	long := strings.Repeat("x", 64<<10)
	for i := 0; i < domains; i++ {
		d := fmt.Sprintf("unknown-%d", i)
		if i%100 == 0 {
			d += long
		}
		f.do(t, req(d, kv("k", "v")))
		if i%20_000 == 0 {
			flush()
		}
	}
	if got := st.CounterValue("ratelimit.service.rate_limit." + engine.OverflowStatsKey + ".domain_not_found"); got == 0 {
		t.Error("no unknown domain was counted under the overflow name")
	}
	if st.DynamicNames() > stats.DefaultMaxDynamic {
		t.Errorf("%d request-named stats held, bound %d", st.DynamicNames(), stats.DefaultMaxDynamic)
	}
	flush()
	flush()
	afterDomains := heapAfterGC()
	const slack = 16 << 20
	if afterDomains > base+slack {
		t.Fatalf("heap grew from %d to %d MiB over %d unknown domains", base>>20, afterDomains>>20, domains)
	}

	// Reloads that replace every rule, with request-named keys in between.
	for gen := 1; gen <= reloads; gen++ {
		load(gen)
		f.do(t, req("rules", kv("k", fmt.Sprintf("g%d_r1", gen))))
		for u := 0; u < 200; u++ {
			f.do(t, req("rules", kv("user", fmt.Sprintf("g%d_u%d", gen, u))))
		}
		flush()
		if h := heapAfterGC(); h > base+8*slack { // stop early rather than exhaust the machine
			t.Fatalf("after %d reloads of %d rules the heap is %d MiB (from %d)", gen, rules, h>>20, base>>20)
		}
	}
	flush()
	end := heapAfterGC()
	t.Logf("heap: %d MiB at start, %d MiB after %d unknown domains, %d MiB after %d reloads of %d rules; %d values in the store",
		base>>20, afterDomains>>20, domains, end>>20, reloads, rules, st.Len())
	if end > base+slack {
		t.Errorf("heap grew from %d to %d MiB over %d reloads of %d changing rules", base>>20, end>>20, reloads, rules)
	}
	// The stats of the rules in use still count.
	f.do(t, req("rules", kv("k", fmt.Sprintf("g%d_r7", reloads))))
	if got := st.CounterValue(fmt.Sprintf("ratelimit.service.rate_limit.rules.k_g%d_r7.total_hits", reloads)); got != 1 {
		t.Errorf("total_hits of a current rule = %d, want 1", got)
	}
	if got := st.CounterValue("ratelimit.service.rate_limit.rules.k_g0_r1.total_hits"); got != 0 {
		t.Errorf("a removed rule's stat is still held (%d)", got)
	}
}
