package odata

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"
)

// maxTracked bounds the entries of the key cache and of the failed-check
// throttle: neither may grow with what callers send.
const maxTracked = 1 << 16

// keyCache remembers active API keys for a short TTL, so that a request's
// key check needs no database connection while data queries hold the pool,
// and a revocation still takes effect within the TTL. Secrets are kept only
// as their SHA-256. Unknown keys are not cached (the throttle handles them).
type keyCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]keyEntry
}

type keyEntry struct {
	id    string
	until time.Time
}

func newKeyCache(ttl time.Duration, now func() time.Time) *keyCache {
	return &keyCache{ttl: ttl, now: now, m: map[[32]byte]keyEntry{}}
}

func (c *keyCache) get(secret string) (string, bool) {
	if c.ttl <= 0 {
		return "", false
	}
	h := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	if !ok {
		return "", false
	}
	if !c.now().Before(e.until) {
		delete(c.m, h)
		return "", false
	}
	return e.id, true
}

func (c *keyCache) put(secret, id string) {
	if c.ttl <= 0 {
		return
	}
	h := sha256.Sum256([]byte(secret))
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxTracked {
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxTracked {
			return // full of live keys: check the rest in the database
		}
	}
	c.m[h] = keyEntry{id: id, until: now.Add(c.ttl)}
}

// failThrottle counts failed key checks per client address in fixed
// windows; an address over the limit is refused (429) without a lookup
// until its window ends.
type failThrottle struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu sync.Mutex
	m  map[string]failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

func newFailThrottle(limit int, window time.Duration, now func() time.Time) *failThrottle {
	return &failThrottle{limit: limit, window: window, now: now, m: map[string]failWindow{}}
}

// blocked says whether addr is over its limit, and for how long.
func (f *failThrottle) blocked(addr string) (time.Duration, bool) {
	if f.limit <= 0 {
		return 0, false
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.m[addr]
	if !ok {
		if len(f.m) < maxTracked {
			return 0, false
		}
		if w, ok = f.m[overflowAddr]; !ok {
			return 0, false
		}
		addr = overflowAddr
	}
	end := w.start.Add(f.window)
	if !now.Before(end) {
		delete(f.m, addr)
		return 0, false
	}
	return end.Sub(now), w.n >= f.limit
}

// failed counts one failed check of addr.
func (f *failThrottle) failed(addr string) {
	if f.limit <= 0 {
		return
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.m[addr]
	if !ok || !now.Before(w.start.Add(f.window)) {
		if !ok && len(f.m) >= maxTracked {
			for k, e := range f.m {
				if !now.Before(e.start.Add(f.window)) {
					delete(f.m, k)
				}
			}
			if len(f.m) >= maxTracked {
				// Every tracked address is live: the untracked ones share
				// one window, so rotating addresses does not escape it.
				addr = overflowAddr
				if w, ok = f.m[addr]; ok && now.Before(w.start.Add(f.window)) {
					w.n++
					f.m[addr] = w
					return
				}
			}
		}
		w = failWindow{start: now}
	}
	w.n++
	f.m[addr] = w
}

// overflowAddr names the state shared by the addresses beyond maxTracked.
const overflowAddr = "overflow"

// recent is a bounded set of names by last use: the browser callers
// (origin and client address) that get a rate limit counter of their own.
// When it is full of names used within idle, a new name is not admitted
// and shares the overflow caller's counter instead: per-address state
// stays bounded whatever the number of addresses, and a flood from many
// addresses is limited as one caller.
type recent struct {
	max  int
	idle time.Duration

	mu sync.Mutex
	ll *list.List // of *recentEntry, most recently used first
	m  map[string]*list.Element
}

type recentEntry struct {
	name string
	seen time.Time
}

func newRecent(max int, idle time.Duration) *recent {
	return &recent{max: max, idle: idle, ll: list.New(), m: map[string]*list.Element{}}
}

// admit marks name used and says whether it is tracked.
func (r *recent) admit(name string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.m[name]; ok {
		el.Value.(*recentEntry).seen = now
		r.ll.MoveToFront(el)
		return true
	}
	if r.ll.Len() >= r.max {
		oldest := r.ll.Back()
		e := oldest.Value.(*recentEntry)
		if now.Sub(e.seen) < r.idle {
			return false
		}
		delete(r.m, e.name)
		r.ll.Remove(oldest)
	}
	r.m[name] = r.ll.PushFront(&recentEntry{name: name, seen: now})
	return true
}

func (r *recent) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ll.Len()
}

// slots counts requests in flight per name against a cap.
type slots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newSlots(max int) *slots { return &slots{max: max, n: map[string]int{}} }

func (s *slots) acquire(name string) bool {
	if s.max <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[name] >= s.max {
		return false
	}
	s.n[name]++
	return true
}

func (s *slots) release(name string) {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[name] <= 1 {
		delete(s.n, name)
		return
	}
	s.n[name]--
}
