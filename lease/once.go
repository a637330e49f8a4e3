package lease

import "sync/atomic"

// onceWords is the size of one generation of onceSet, in 64-bit words:
// 2¹⁹ bits (64 KiB), so that 10,000 keys seen once collide with 2 % of
// the keys that follow.
const onceWords = 1 << 13

// onceSet remembers the window keys answered once, without a state: a
// key of a large key space is mostly seen once per window, and a state
// for it (an allocation, a map entry, a review at every sweep, a second
// for the collector) is most of what its first decision costs beyond
// exact mode's. A key found here has a state made at its next decision;
// a collision only makes a state one decision early. Two generations of
// bits, the older cleared and made the newer every coldIdle (rotate): a
// key is remembered for one to two of them.
type onceSet struct {
	gen [2][onceWords]atomic.Uint64
	cur atomic.Uint32
	at  int64 // unix µs of the last rotation; the sweeper's alone
}

// seen marks the key of hash h and reports whether it was marked already.
func (o *onceSet) seen(h uint64) bool {
	i, bit := (h>>8)%onceWords, uint64(1)<<(h>>58)
	cur := o.cur.Load() & 1
	if o.gen[cur^1][i].Load()&bit != 0 {
		return true
	}
	return o.gen[cur][i].Or(bit)&bit != 0
}

// rotate clears the older generation and makes it the newer, once every
// coldIdle (called by the sweeper).
func (o *onceSet) rotate(now int64) {
	if now-o.at < coldIdle.Microseconds() {
		return
	}
	o.at = now
	old := (o.cur.Load() & 1) ^ 1
	for i := range o.gen[old] {
		o.gen[old][i].Store(0)
	}
	o.cur.Store(old)
}
