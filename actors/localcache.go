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
// ratelimit.localcache.* gauges.
type OverLimitCache struct {
	clock   func() time.Time
	shards  [cacheShards]cacheShard
	perCap  int // bytes per shard
	lookups atomic.Int64
	hits    atomic.Int64
	over    atomic.Int64 // overwrites
	evicted atomic.Int64
	expired atomic.Int64
	nanos   atomic.Int64 // time spent in lookups, for averageAccessTime

	g struct {
		entries, hits, misses, lookups, overwrites, evacuates, expired, avgAccess *stats.Gauge
	}
}

type cacheShard struct {
	mu    sync.Mutex
	m     map[string]int64 // key → expiry, unix nanoseconds
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
		c.shards[i].m = map[string]int64{}
	}
	if st == nil {
		st = stats.NewStore()
	}
	p := "ratelimit.localcache."
	c.g.entries, c.g.hits, c.g.misses = st.Gauge(p+"entryCount"), st.Gauge(p+"hitCount"), st.Gauge(p+"missCount")
	c.g.lookups, c.g.overwrites = st.Gauge(p+"lookupCount"), st.Gauge(p+"overwriteCount")
	c.g.evacuates, c.g.expired, c.g.avgAccess = st.Gauge(p+"evacuateCount"), st.Gauge(p+"expiredCount"), st.Gauge(p+"averageAccessTime")
	return c
}

func (c *OverLimitCache) shard(key string) *cacheShard {
	return &c.shards[xxhash.Sum64String(key)%uint64(len(c.shards))]
}

// Contains reports whether key is cached and not expired.
func (c *OverLimitCache) Contains(key string) bool {
	start := time.Now()
	now := c.clock().UnixNano()
	s := c.shard(key)
	s.mu.Lock()
	exp, ok := s.m[key]
	if ok && exp <= now {
		delete(s.m, key)
		s.bytes -= len(key) + entryOverhead
		c.expired.Add(1)
		ok = false
	}
	s.mu.Unlock()
	c.lookups.Add(1)
	if ok {
		c.hits.Add(1)
	}
	c.nanos.Add(int64(time.Since(start)))
	c.publish()
	return ok
}

// Add caches key for ttl.
func (c *OverLimitCache) Add(key string, ttl time.Duration) {
	now := c.clock().UnixNano()
	s := c.shard(key)
	cost := len(key) + entryOverhead
	s.mu.Lock()
	if _, exists := s.m[key]; exists {
		c.over.Add(1)
	} else {
		if s.bytes+cost > c.perCap {
			c.makeRoom(s, now, cost)
		}
		s.bytes += cost
	}
	s.m[key] = now + int64(ttl)
	s.mu.Unlock()
	c.publish()
}

// makeRoom drops expired entries, then arbitrary ones, until cost fits.
func (c *OverLimitCache) makeRoom(s *cacheShard, now int64, cost int) {
	for k, exp := range s.m {
		if exp <= now {
			delete(s.m, k)
			s.bytes -= len(k) + entryOverhead
			c.expired.Add(1)
		}
	}
	for k := range s.m {
		if s.bytes+cost <= c.perCap {
			break
		}
		delete(s.m, k)
		s.bytes -= len(k) + entryOverhead
		c.evicted.Add(1)
	}
}

// Len is the number of entries, expired ones not yet dropped included.
func (c *OverLimitCache) Len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.Lock()
		n += len(c.shards[i].m)
		c.shards[i].mu.Unlock()
	}
	return n
}

func (c *OverLimitCache) publish() {
	lookups := c.lookups.Load()
	c.g.lookups.Set(lookups)
	c.g.hits.Set(c.hits.Load())
	c.g.misses.Set(lookups - c.hits.Load())
	c.g.overwrites.Set(c.over.Load())
	c.g.evacuates.Set(c.evicted.Load())
	c.g.expired.Set(c.expired.Load())
	if lookups > 0 {
		c.g.avgAccess.Set(c.nanos.Load() / lookups)
	}
}

// PublishEntries updates the entryCount gauge; it takes every shard lock, so
// it is called when stats are flushed rather than on each lookup.
func (c *OverLimitCache) PublishEntries() { c.g.entries.Set(int64(c.Len())) }
