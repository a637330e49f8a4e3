package actors_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestOverLimitCacheExpiry(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock(time.Unix(1000, 0))
	st := stats.NewStore()
	c := actors.NewOverLimitCache(0, clk.Now, st)
	if c.Contains("k") {
		t.Fatal("empty cache contains k")
	}
	c.Add("k", time.Minute)
	c.Add("k", time.Minute) // an overwrite
	if !c.Contains("k") {
		t.Fatal("k not cached")
	}
	clk.Add(time.Minute)
	if c.Contains("k") {
		t.Fatal("k still cached when its window ended")
	}
	st.Collect() // what a stats flush does first
	gauge := func(n string) int64 { return st.Gauge("ratelimit.localcache." + n).Value() }
	for name, want := range map[string]int64{"lookupCount": 3, "hitCount": 1, "missCount": 2, "overwriteCount": 1, "expiredCount": 1, "entryCount": 0, "averageAccessTime": 0} {
		if got := gauge(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// TestOverLimitCacheEntriesAndAccessTime: at each collection entryCount is
// the live number of entries, and averageAccessTime is freecache's: the
// mean last-access time of the entries in Unix seconds, moved by adds,
// overwrites and hits, not by misses.
func TestOverLimitCacheEntriesAndAccessTime(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock(time.Unix(1000, 0))
	st := stats.NewStore()
	c := actors.NewOverLimitCache(0, clk.Now, st)
	gauge := func(n string) int64 {
		st.Collect() // what a stats flush does first
		return st.Gauge("ratelimit.localcache." + n).Value()
	}
	steps := []struct {
		name          string
		do            func()
		entries, mean int64
	}{
		{"add a at 1000", func() { c.Add("a", time.Hour) }, 1, 1000},
		{"add b at 1010", func() { clk.Add(10 * time.Second); c.Add("b", time.Hour) }, 2, 1005},
		{"hit a at 1030", func() { clk.Add(20 * time.Second); c.Contains("a") }, 2, 1020},
		{"miss at 1040", func() { clk.Add(10 * time.Second); c.Contains("zzz") }, 2, 1020},
		{"overwrite b at 1050", func() { clk.Add(10 * time.Second); c.Add("b", time.Minute) }, 2, 1040},
		{"b expires, found on lookup", func() { clk.Add(time.Minute); c.Contains("b") }, 1, 1030},
		{"add c", func() { c.Add("c", time.Hour) }, 2, (1030 + 1110) / 2},
	}
	for _, s := range steps {
		s.do()
		if got := gauge("entryCount"); got != s.entries {
			t.Errorf("%s: entryCount %d, want %d", s.name, got, s.entries)
		}
		if got := gauge("averageAccessTime"); got != s.mean {
			t.Errorf("%s: averageAccessTime %d, want %d", s.name, got, s.mean)
		}
	}
}

func TestOverLimitCacheStaysWithinItsSize(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock(time.Unix(1000, 0))
	st := stats.NewStore()
	c := actors.NewOverLimitCache(512*1024, clk.Now, st)
	for i := 0; i < 100000; i++ {
		c.Add(fmt.Sprintf("domain_key_value_%08d_1795313460", i), time.Hour)
	}
	// About 100 bytes an entry: 512 KiB holds ~5,000, never the 100,000 added.
	if n := c.Len(); n > 6000 || n < 1000 {
		t.Fatalf("%d entries in a 512 KiB cache", n)
	}
	st.Collect()
	if st.Gauge("ratelimit.localcache.evacuateCount").Value() == 0 {
		t.Fatal("no evictions counted")
	}
	// Expired entries make room before live ones are evicted.
	clk.Add(2 * time.Hour)
	c.Add("fresh", time.Hour)
	if !c.Contains("fresh") {
		t.Fatal("fresh entry missing")
	}
}

// TestOverLimitCacheGaugesAtCollectOnly: adds and lookups leave the gauges
// alone (they are on every request's path); a collection, which each stats
// flush runs, sets them from the live figures, entryCount included.
func TestOverLimitCacheGaugesAtCollectOnly(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock(time.Unix(1000, 0))
	st := stats.NewStore()
	c := actors.NewOverLimitCache(0, clk.Now, st)
	names := []string{"entryCount", "hitCount", "missCount", "lookupCount", "overwriteCount", "evacuateCount", "expiredCount", "averageAccessTime"}
	gauges := func() map[string]int64 {
		m := map[string]int64{}
		for _, n := range names {
			m[n] = st.Gauge("ratelimit.localcache." + n).Value()
		}
		return m
	}
	c.Add("a", time.Hour)
	c.Add("b", time.Hour)
	c.Add("b", time.Hour)
	st.Collect()
	want := map[string]int64{"entryCount": 2, "hitCount": 0, "missCount": 0, "lookupCount": 0, "overwriteCount": 1, "evacuateCount": 0, "expiredCount": 0, "averageAccessTime": 1000}
	if got := gauges(); !maps.Equal(got, want) {
		t.Fatalf("after a collection: %v, want %v", got, want)
	}

	clk.Add(time.Second)
	c.Contains("a")
	c.Contains("zzz")
	c.Add("c", time.Hour)
	if got := gauges(); !maps.Equal(got, want) {
		t.Fatalf("lookups and adds set the gauges: %v, want them unchanged %v", got, want)
	}

	st.Collect()
	want = map[string]int64{"entryCount": 3, "hitCount": 1, "missCount": 1, "lookupCount": 2, "overwriteCount": 1, "evacuateCount": 0, "expiredCount": 0, "averageAccessTime": (1001 + 1000 + 1001) / 3}
	if got := gauges(); !maps.Equal(got, want) {
		t.Fatalf("after the next collection: %v, want %v", got, want)
	}
}
