package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/engine/stats"
)

// OverLimitCache remembers cache keys that went over their limit until their
// window ends (LOCAL_CACHE_SIZE_IN_BYTES), so repeat offenders are answered
// without a backend call. It implements engine.OverLimitCache.
//
// Memory is bounded by an estimate of bytes per entry; when full, expired
// entries go first, then arbitrary ones (the reference's freecache also
// evicts under pressure). Its counters are exported as the reference's
// ratelimit.localcache.* gauges, with freecache's meanings: entryCount is the
// number of entries held (expired ones not yet dropped included), and
// averageAccessTime the mean of the entries' last access times, in Unix
// seconds (an entry is accessed when it is added, overwritten or found).
// The gauges are set when the stats store is collected (stats.Store.OnCollect,
// at each flush of the metrics sink), not on the lookup path: every request
// that has a local cache asks it, and a flush reads the gauges only every few
// seconds.
type OverLimitCache struct {
	clock   func() time.Time
	shards  [cacheShards]cacheShard
	perCap  int // bytes per shard
	lookups atomic.Int64
	hits    atomic.Int64
	over    atomic.Int64 // overwrites
	evicted atomic.Int64
	expired atomic.Int64
	entries atomic.Int64
	// accessSum is the sum of the entries' last access times (Unix seconds).
	accessSum atomic.Int64

	g struct {
		entries, hits, misses, lookups, overwrites, evacuates, expired, avgAccess *stats.Gauge
	}
}

type cacheEntry struct {
	expires int64 // unix nanoseconds
	access  int64 // unix seconds of the last access
}

type cacheShard struct {
	mu    sync.Mutex
	m     map[string]cacheEntry
	bytes int
}

// cacheShards spreads lock contention; a power of two.
const cacheShards = 16

// entryOverhead approximates a map entry's cost beyond its key bytes.
const entryOverhead = 64

// minCacheSize is freecache's minimum, which the reference inherits.
const minCacheSize = 512 * 1024

// NewOverLimitCache returns a cache of about size bytes (at least 512 KiB).
func NewOverLimitCache(size int, clock func() time.Time, st *stats.Store) *OverLimitCache {
	if clock == nil {
		clock = time.Now
	}
	size = max(size, minCacheSize)
	c := &OverLimitCache{clock: clock, perCap: size / cacheShards}
	for i := range c.shards {
		c.shards[i].m = map[string]cacheEntry{}
	}
	if st == nil {
		st = stats.NewStore()
	}
	p := "ratelimit.localcache."
	c.g.entries, c.g.hits, c.g.misses = st.Gauge(p+"entryCount"), st.Gauge(p+"hitCount"), st.Gauge(p+"missCount")
	c.g.lookups, c.g.overwrites = st.Gauge(p+"lookupCount"), st.Gauge(p+"overwriteCount")
	c.g.evacuates, c.g.expired, c.g.avgAccess = st.Gauge(p+"evacuateCount"), st.Gauge(p+"expiredCount"), st.Gauge(p+"averageAccessTime")
	st.OnCollect(c.publish)
	return c
}

func (c *OverLimitCache) shard(key string) *cacheShard {
	return &c.shards[xxhash.Sum64String(key)%uint64(len(c.shards))]
}

// drop removes an entry the caller has found in s (under s.mu).
func (c *OverLimitCache) drop(s *cacheShard, key string, e cacheEntry) {
	delete(s.m, key)
	s.bytes -= len(key) + entryOverhead
	c.entries.Add(-1)
	c.accessSum.Add(-e.access)
}

// Contains reports whether key is cached and not expired.
func (c *OverLimitCache) Contains(key string) bool {
	now := c.clock()
	nowNanos, nowSec := now.UnixNano(), now.Unix()
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.m[key]
	if ok && e.expires <= nowNanos {
		c.drop(s, key, e)
		c.expired.Add(1)
		ok = false
	} else if ok {
		c.accessSum.Add(nowSec - e.access)
		e.access = nowSec
		s.m[key] = e
	}
	s.mu.Unlock()
	c.lookups.Add(1)
	if ok {
		c.hits.Add(1)
	}
	return ok
}

// Add caches key for ttl.
func (c *OverLimitCache) Add(key string, ttl time.Duration) {
	now := c.clock()
	nowNanos, nowSec := now.UnixNano(), now.Unix()
	s := c.shard(key)
	cost := len(key) + entryOverhead
	s.mu.Lock()
	if old, exists := s.m[key]; exists {
		c.over.Add(1)
		c.accessSum.Add(nowSec - old.access)
	} else {
		if s.bytes+cost > c.perCap {
			c.makeRoom(s, nowNanos, cost)
		}
		s.bytes += cost
		c.entries.Add(1)
		c.accessSum.Add(nowSec)
	}
	s.m[key] = cacheEntry{expires: nowNanos + int64(ttl), access: nowSec}
	s.mu.Unlock()
}

// makeRoom drops expired entries, then arbitrary ones, until cost fits.
func (c *OverLimitCache) makeRoom(s *cacheShard, now int64, cost int) {
	for k, e := range s.m {
		if e.expires <= now {
			c.drop(s, k, e)
			c.expired.Add(1)
		}
	}
	for k, e := range s.m {
		if s.bytes+cost <= c.perCap {
			break
		}
		c.drop(s, k, e)
		c.evicted.Add(1)
	}
}

// Len is the number of entries, expired ones not yet dropped included.
func (c *OverLimitCache) Len() int { return int(c.entries.Load()) }

// publish sets the gauges from the live figures; the stats store runs it
// right before each flush reads them.
func (c *OverLimitCache) publish() {
	lookups := c.lookups.Load()
	c.g.lookups.Set(lookups)
	c.g.hits.Set(c.hits.Load())
	c.g.misses.Set(lookups - c.hits.Load())
	c.g.overwrites.Set(c.over.Load())
	c.g.evacuates.Set(c.evicted.Load())
	c.g.expired.Set(c.expired.Load())
	n := c.entries.Load()
	c.g.entries.Set(n)
	if n > 0 {
		c.g.avgAccess.Set(c.accessSum.Load() / n)
	} else {
		c.g.avgAccess.Set(0)
	}
}
