package lease

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
)

// The once set's sizes, in 64-bit words: from 2¹⁹ bits (64 KiB, where
// 10,000 keys collide with 2 % of the keys that follow) to 2²⁴ (2 MiB, a
// million keys a generation at onceBitsPerKey). A generation holds about
// its keys × onceBitsPerKey bits: when one fills past 1/onceBitsPerKey it
// is replaced by one four times larger, and each rotation sizes the next
// for as many keys as the last generation held.
//
// A fixed 2¹⁹ bits saturated: after 300,000 new keys within a second,
// 44 % of the next were taken for keys seen before, after a million 86 %,
// and each made a state. BenchmarkColdKey at a million keys (as many in
// about a second): 1,713–1,779 ns and 364–381 B a lease decision with the
// fixed set, 967–998 ns and 199 B with this one (exact mode 647–830 ns,
// 166 B, in the same runs).
const (
	onceMinWords   = 1 << 13
	onceMaxWords   = 1 << 18
	onceBitsPerKey = 16
	onceGrowth     = 4
	// onceSampleShift: a generation counts the bits it sets in its first
	// 1/2^onceSampleShift words only, so that two cores marking new keys
	// share a counter 64 times less often.
	onceSampleShift = 6
)

// onceSet remembers the window keys answered once, without a state: a
// key of a large key space is mostly seen once per window, and a state
// for it (an allocation, a map entry, a review at every sweep, a second
// for the collector) is most of what its first decision costs beyond
// exact mode's. A key found here has a state made at its next decision;
// a collision only makes a state one decision early, and a key forgotten
// early (a generation replaced before its time) only has its state made
// one decision late. Two generations of bits: the older is dropped and a
// new one made the newer every coldIdle (rotate), or at once when the
// newer fills (grow); a key is remembered for one to two of them.
type onceSet struct {
	gen [2]atomic.Pointer[onceGen]
	cur atomic.Uint32
	// mu serializes rotate and grow; grow only tries it (a decision never
	// waits for the sweeper).
	mu sync.Mutex
	at int64 // unix µs of the last rotation
}

// onceGen is one generation's bits.
type onceGen struct {
	words []atomic.Uint64 // a power of two of them
	mask  uint64
	// sampled is how many bits were set in the first len(words) >>
	// onceSampleShift words; full is where the generation should grow.
	sampled atomic.Int64
	full    int64
}

func newOnceGen(words int) *onceGen {
	return &onceGen{
		words: make([]atomic.Uint64, words),
		mask:  uint64(words - 1),
		// Set bits ≥ 1/onceBitsPerKey of the sampled ones.
		full: int64(max((words>>onceSampleShift)*64/onceBitsPerKey, 1)),
	}
}

func (g *onceGen) at(h uint64) (i, bit uint64) { return (h >> 8) & g.mask, 1 << (h >> 58) }

func (g *onceGen) has(h uint64) bool {
	i, bit := g.at(h)
	return g.words[i].Load()&bit != 0
}

// mark sets h's bit and reports whether it was set already.
func (g *onceGen) mark(h uint64) bool {
	i, bit := g.at(h)
	if g.words[i].Load()&bit != 0 {
		return true
	}
	if g.words[i].Or(bit)&bit != 0 {
		return true
	}
	if i < uint64(len(g.words)>>onceSampleShift) {
		g.sampled.Add(1)
	}
	return false
}

// keys estimates how many keys were marked: from the share of the sampled
// words' bits that are set (a share s of m bits is −m·ln(1−s) keys).
func (g *onceGen) keys() float64 {
	sampleBits := float64((len(g.words) >> onceSampleShift) * 64)
	s := float64(g.sampled.Load()) / sampleBits
	if s >= 1 {
		return math.Inf(1)
	}
	return -float64(len(g.words)*64) * math.Log1p(-s)
}

// sizeFor is the number of words for a generation of n keys.
func sizeFor(n float64) int {
	want := n * onceBitsPerKey / 64
	if !(want < onceMaxWords) { // and +Inf, NaN
		return onceMaxWords
	}
	w := 1 << bits.Len(uint(max(want, 1)-1)) // the next power of two
	return min(max(w, onceMinWords), onceMaxWords)
}

func (o *onceSet) init() {
	o.gen[0].Store(newOnceGen(onceMinWords))
	o.gen[1].Store(newOnceGen(onceMinWords))
}

// seen marks the key of hash h and reports whether it was marked already.
func (o *onceSet) seen(h uint64) bool {
	cur := o.cur.Load() & 1
	if o.gen[cur^1].Load().has(h) {
		return true
	}
	g := o.gen[cur].Load()
	if g.mark(h) {
		return true
	}
	if g.sampled.Load() >= g.full && len(g.words) < onceMaxWords {
		o.grow(g)
	}
	return false
}

// grow replaces g, the newer generation, by one onceGrowth times larger;
// g becomes the older. Nothing if another grow or a rotation is under
// way, or g was replaced meanwhile.
func (o *onceSet) grow(g *onceGen) {
	if !o.mu.TryLock() {
		return
	}
	defer o.mu.Unlock()
	cur := o.cur.Load() & 1
	if o.gen[cur].Load() != g {
		return
	}
	o.gen[cur^1].Store(newOnceGen(min(len(g.words)*onceGrowth, onceMaxWords)))
	o.cur.Store(cur ^ 1)
}

// rotate drops the older generation and makes a new one the newer, sized
// for as many keys as the newer held, once every coldIdle (called by the
// sweeper).
func (o *onceSet) rotate(now int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now-o.at < coldIdle.Microseconds() {
		return
	}
	o.at = now
	cur := o.cur.Load() & 1
	words := sizeFor(o.gen[cur].Load().keys())
	if old := o.gen[cur^1].Load(); len(old.words) == words {
		// Cleared in place: a decision reading it meanwhile as the
		// older generation finds a key seen, and makes a state early.
		for i := range old.words {
			old.words[i].Store(0)
		}
		old.sampled.Store(0)
	} else {
		o.gen[cur^1].Store(newOnceGen(words))
	}
	o.cur.Store(cur ^ 1)
}
