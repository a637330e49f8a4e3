package odata

import (
	"container/list"
	"crypto/sha256"
	"net/netip"
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

// failThrottle counts failed key checks per client network in fixed
// windows: an IPv4 /24 or an IPv6 /64, since one host owns a whole /64 and
// rotating addresses within it costs nothing. A network over the limit is
// refused (429) without a lookup until its window ends.
//
// When every tracked network is live and the table is full, the failures
// of untracked networks are counted together (the overflow window), so
// that rotating networks does not escape the throttle; but the overflow
// refuses no key before it is checked: a caller from an untracked network
// is always looked up, a valid key passes, and only a failed one is then
// answered 429 instead of 403. An attacker's overflow never locks out
// valid keys.
type failThrottle struct {
	limit  int
	window time.Duration
	now    func() time.Time
	max    int // networks tracked (maxTracked)

	mu        sync.Mutex
	m         map[netip.Prefix]failWindow
	overflow  failWindow
	lastSweep time.Time
}

type failWindow struct {
	start time.Time
	n     int
}

// failState is what a failed-check throttle says of a caller.
type failState int

const (
	failAllowed  failState = iota // check the key
	failBlocked                   // 429 without a lookup
	failOverflow                  // check the key; a failure is answered 429
)

func newFailThrottle(limit int, window time.Duration, now func() time.Time) *failThrottle {
	return &failThrottle{limit: limit, window: window, now: now, max: maxTracked, m: map[netip.Prefix]failWindow{}}
}

// failNetwork is the network addr's failures are counted by.
func failNetwork(addr string) netip.Prefix {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{} // not an address: all such callers together
	}
	a = a.Unmap()
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

// check says how to treat a key check from addr, and how long its state
// lasts.
func (f *failThrottle) check(addr string) (time.Duration, failState) {
	if f.limit <= 0 {
		return 0, failAllowed
	}
	now := f.now()
	net := failNetwork(addr)
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, ok := f.m[net]; ok {
		end := w.start.Add(f.window)
		if !now.Before(end) {
			delete(f.m, net)
			return 0, failAllowed
		}
		if w.n >= f.limit {
			return end.Sub(now), failBlocked
		}
		return 0, failAllowed
	}
	if len(f.m) >= f.max {
		if end := f.overflow.start.Add(f.window); now.Before(end) && f.overflow.n >= f.limit {
			return end.Sub(now), failOverflow
		}
	}
	return 0, failAllowed
}

// failed counts one failed check of addr.
func (f *failThrottle) failed(addr string) {
	if f.limit <= 0 {
		return
	}
	now := f.now()
	net := failNetwork(addr)
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.m[net]
	if ok && now.Before(w.start.Add(f.window)) {
		w.n++
		f.m[net] = w
		return
	}
	if !ok && len(f.m) >= f.max {
		f.sweep(now)
	}
	if ok || len(f.m) < f.max {
		f.m[net] = failWindow{start: now, n: 1}
		return
	}
	// Every tracked network is live: the untracked ones share a window.
	if !now.Before(f.overflow.start.Add(f.window)) {
		f.overflow = failWindow{start: now}
	}
	f.overflow.n++
}

// sweep drops the ended windows, at most a few times a window: a full
// table of live networks is not walked again for every failure.
func (f *failThrottle) sweep(now time.Time) {
	if now.Sub(f.lastSweep) < f.window/8 {
		return
	}
	f.lastSweep = now
	for k, e := range f.m {
		if !now.Before(e.start.Add(f.window)) {
			delete(f.m, k)
		}
	}
}

// overflowAddr names the browser callers' state shared beyond maxTracked.
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
