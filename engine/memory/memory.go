package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/tick"
)

// entry is one counter. The map holds pointers so that an update never
// assigns to the map again: Go replaces a string key on every assignment,
// and the stored key must stay the exact-size copy made on insert, not the
// caller's string (the engine builds keys in a buffer grown for the
// longest window number).
type entry struct {
	n       uint64
	expires int64 // unix nanoseconds
}

// The memory a counter takes, counted as Redis counts maxmemory: what the
// allocator hands out for it, not an estimate of the payload. The key's
// copy (its size class), the entry (16 bytes, its own allocation) and the
// map slot: a 16-byte string header, an 8-byte pointer and a control byte,
// charged at the lowest occupancy of Go's tables (7/16, right after one
// doubles), since a map never shrinks.
const (
	entryBytes   = 16
	mapSlotBytes = (16 + 8 + 1) * 16 / 7
)

// DefaultMaxKeyBytes is the longest cache key accepted by default.
const DefaultMaxKeyBytes = 4096

// cost is what a counter under key is charged against a Budget.
func cost(key string) int64 { return allocSize(len(key)) + entryBytes + mapSlotBytes }

// sizeClasses are the Go allocator's small object sizes up to 32 KiB; a
// string of n bytes takes the first class of at least n.
var sizeClasses = [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792,
	2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728,
	10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocSize is the bytes the allocator takes for an n-byte string: its
// size class, or whole 8 KiB pages above the largest.
func allocSize(n int) int64 {
	if n == 0 {
		return 0
	}
	for _, c := range sizeClasses {
		if int64(n) <= c {
			return c
		}
	}
	return (int64(n) + 8191) &^ 8191
}

// Budget is the memory the counters of one service may take, shared by its
// backends (one per shard).
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget allows maxBytes of counters (keys included).
func NewBudget(maxBytes int64) *Budget { return &Budget{max: maxBytes} }

// Used is the bytes charged now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Max is the bound.
func (b *Budget) Max() int64 { return b.max }

// reserve charges n bytes if they fit.
func (b *Budget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *Budget) release(n int64) { b.used.Add(-n) }

// Charge takes n bytes for state kept beside the counters (the quota
// service's buckets) if they fit, so that one bound holds for both.
func (b *Budget) Charge(n int64) bool { return b.reserve(n) }

// Refund gives back n bytes Charge took.
func (b *Budget) Refund(n int64) { b.release(n) }

// Options configure a bounded backend.
type Options struct {
	// Clock is the time source; time.Now when nil.
	Clock func() time.Time
	// Budget bounds the memory of the counters; nil is no bound.
	Budget *Budget
	// MaxKeyBytes rejects longer keys (ValidateKey); 0 is DefaultMaxKeyBytes.
	MaxKeyBytes int
	// SweepEvery, when positive, runs a goroutine that drops expired
	// counters this often, so memory is returned with no traffic at all.
	// Close stops it.
	SweepEvery time.Duration
}

// Backend holds counters in memory. It is safe for concurrent use, though the
// shard that owns it is normally its only caller (so the lock is uncontended).
type Backend struct {
	clock       func() time.Time
	budget      *Budget
	maxKeyBytes int

	mu sync.Mutex
	m  map[string]*entry
	// sinceSweep counts operations since the last sweep of expired counters;
	// a sweep runs once it reaches the map's size, so sweeping is amortised
	// O(1) per operation and memory stays bounded by live windows.
	sinceSweep int
	closed     bool

	stop chan struct{} // closed by Close; ends the sweeper
	done chan struct{} // closed when the sweeper has returned
}

// New returns an empty, unbounded backend; clock may be nil for time.Now.
func New(clock func() time.Time) *Backend { return NewWithOptions(Options{Clock: clock}) }

// EnsureDefaults fills the clock and the key bound when they are not set,
// and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	return o
}

// NewWithOptions returns an empty backend with a memory bound and a sweeper
// as o says.
func NewWithOptions(o Options) *Backend {
	o.EnsureDefaults()
	b := &Backend{clock: o.Clock, budget: o.Budget, maxKeyBytes: o.MaxKeyBytes, m: map[string]*entry{}}
	if o.SweepEvery > 0 {
		b.stop, b.done = make(chan struct{}), make(chan struct{})
		go b.sweeper(o.SweepEvery)
	}
	return b
}

func (b *Backend) sweeper(every time.Duration) {
	defer close(b.done)
	tick.Every(b.stop, every, func() {
		b.mu.Lock()
		b.sweep(b.clock().UnixNano())
		b.mu.Unlock()
	})
}

// ErrFull is returned when new counters do not fit the memory bound.
var ErrFull = fmt.Errorf("memory backend full")

// ValidateKey rejects keys longer than the backend accepts, so that one
// oversized descriptor value fails its own request with a clear message.
func (b *Backend) ValidateKey(key string) error { return KeyLimit(b.maxKeyBytes).ValidateKey(key) }

// KeyLimit is the longest cache key a memory backend accepts, as an
// engine.KeyValidator shared by every shard's backend.
type KeyLimit int

// ValidateKey implements engine.KeyValidator.
func (k KeyLimit) ValidateKey(key string) error {
	if len(key) > int(k) {
		return fmt.Errorf("memory backend: cache key of %d bytes is over the limit of %d bytes (a descriptor value too long?)", len(key), int(k))
	}
	return nil
}

// Exec implements engine.Backend. With a Budget, the counters the
// batch would create must fit (after dropping expired ones), or nothing of
// the batch is applied and ErrFull is returned.
func (b *Backend) Exec(_ context.Context, batch []engine.CounterOp) error {
	now := b.clock().UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	var charged []string
	if b.budget != nil {
		var err error
		if charged, err = b.reserveNew(batch, now); err != nil {
			return err
		}
	}
	for i := range batch {
		inc := &batch[i]
		e := b.m[inc.Key]
		var n uint64
		if e != nil && e.expires > now {
			n = e.n
		}
		switch inc.Kind {
		case engine.OpGet:
			inc.After = n
			continue
		case engine.OpTokenBucket:
			inc.After = n
			if tat, ok := engine.TokenBucketStep(int64(n), inc); ok && inc.Hits > 0 {
				e = b.entry(e, inc.Key)
				e.n, e.expires = uint64(tat), now+int64(engine.TokenBucketTTL(tat, inc.Bucket.Now))
			}
			continue
		case engine.OpTokenTake:
			inc.After = n
			if tat, took := engine.TokenBucketTake(int64(n), inc); took > 0 {
				e = b.entry(e, inc.Key)
				e.n, e.expires = uint64(tat), now+int64(engine.TokenBucketTTL(tat, inc.Bucket.Now))
			}
			continue
		case engine.OpRelease:
			if e != nil && e.expires > now {
				e.n -= min(e.n, inc.Hits)
			}
			inc.After = n - min(n, inc.Hits)
			continue
		}
		e = b.entry(e, inc.Key)
		e.n, e.expires = n+inc.Hits, now+int64(inc.TTL)
		inc.After = e.n
	}
	for _, k := range charged {
		if _, ok := b.m[k]; !ok { // a step that stored nothing (a bucket that refused)
			b.budget.release(cost(k))
		}
	}
	b.sinceSweep += len(batch)
	if b.sinceSweep >= max(len(b.m), 1024) {
		b.sweep(now)
	}
	return nil
}

// entry returns e, or a new entry stored under an exact-size copy of key.
func (b *Backend) entry(e *entry, key string) *entry {
	if e == nil {
		e = &entry{}
		b.m[strings.Clone(key)] = e
	}
	return e
}

// newKeys are the keys of batch not held yet that an op may create (a read
// creates nothing), each once.
func (b *Backend) newKeys(batch []engine.CounterOp) (keys []string, need int64) {
	var seen map[string]bool // a key can come twice, with two kinds; only in big batches is a map cheaper
	if len(batch) > 32 {
		seen = make(map[string]bool)
	}
	for i := range batch {
		k := batch[i].Key
		if batch[i].Kind == engine.OpGet || batch[i].Kind == engine.OpRelease {
			continue
		}
		if _, ok := b.m[k]; ok {
			continue
		}
		if seen != nil {
			if seen[k] {
				continue
			}
			seen[k] = true
		} else if slices.Contains(keys, k) {
			continue
		}
		keys = append(keys, k)
		need += cost(k)
	}
	return keys, need
}

// reserveNew charges the budget for the counters batch may create and
// returns their keys.
func (b *Backend) reserveNew(batch []engine.CounterOp, now int64) ([]string, error) {
	keys, need := b.newKeys(batch)
	if need == 0 || b.budget.reserve(need) {
		return keys, nil
	}
	// Full: expired counters may be what fills it.
	b.sweep(now)
	keys, need = b.newKeys(batch)
	if need == 0 || b.budget.reserve(need) {
		return keys, nil
	}
	return nil, fmt.Errorf("%w: %d of %d bytes hold live counters, %d more needed (SLUICE_MEMORY_MAX_BYTES)",
		ErrFull, b.budget.Used(), b.budget.max, need)
}

func (b *Backend) sweep(now int64) {
	var freed int64
	for k, e := range b.m {
		if e.expires <= now {
			delete(b.m, k)
			freed += cost(k)
		}
	}
	if b.budget != nil && freed > 0 {
		b.budget.release(freed)
	}
	b.sinceSweep = 0
}

// Len is the number of counters held, expired ones not yet swept included.
func (b *Backend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Inline tells the actors package that calls return at once and need no
// goroutine of their own.
func (b *Backend) Inline() bool { return true }

// Close drops every counter and stops the sweeper.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.budget != nil {
		var held int64
		for k := range b.m {
			held += cost(k)
		}
		b.budget.release(held)
	}
	b.m = map[string]*entry{}
	first := !b.closed
	b.closed = true
	b.mu.Unlock()
	if first && b.stop != nil {
		close(b.stop)
		<-b.done
	}
	return nil
}
