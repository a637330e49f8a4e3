package quota

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// winState is what a hub keeps of one window's counter: what it reserved
// there and has not given back (held), what it asked for and has no
// answer to yet (inflight), and when the store last refused part of a
// reservation there (full; zero: not lately).
type winState struct {
	start          int64 // the window's start, unix nanoseconds
	held, inflight uint64
	full           time.Time
}

// windows are a hub's window states: the current window and those it
// reserved ahead, a few at most, so a slice scanned whole. Three maps by
// window cost a flood's 300,000 hubs about 700 bytes each.
type windows []winState

// get is the state of the window starting at start, or nil.
func (ws windows) get(start int64) *winState {
	for i := range ws {
		if ws[i].start == start {
			return &ws[i]
		}
	}
	return nil
}

// at is the state of the window starting at start, added if new.
func (ws *windows) at(start int64) *winState {
	if w := ws.get(start); w != nil {
		return w
	}
	*ws = append(*ws, winState{start: start})
	return &(*ws)[len(*ws)-1]
}

// room makes room for n more states at once: a new bucket's first plan
// reserves on every window its assignment reaches (a dozen or more), and
// growing the array by doubling allocated three times what it kept.
func (ws *windows) room(n int) { *ws = slices.Grow(*ws, n) }

// tidy drops the states that keep nothing.
func (ws *windows) tidy() {
	out := (*ws)[:0]
	for _, w := range *ws {
		if w.held > 0 || w.inflight > 0 || !w.full.IsZero() {
			out = append(out, w)
		}
	}
	clear((*ws)[len(out):])
	*ws = out
	if len(out) == 0 {
		*ws = nil // a hub at rest keeps no array
	}
}

// holds reports whether the hub holds anything on a counter.
func (ws windows) holds() bool {
	for _, w := range ws {
		if w.held > 0 {
			return true
		}
	}
	return false
}

// busy reports whether a store call of the hub is still out.
func (ws windows) busy() bool {
	for _, w := range ws {
		if w.inflight > 0 {
			return true
		}
	}
	return false
}

// refusedLately reports whether the store refused the window starting at
// start within alloc.RetryShort of now.
func (ws windows) refusedLately(start int64, now time.Time) bool {
	w := ws.get(start)
	return w != nil && w.refused(now)
}

// refused reports whether the store refused part of a reservation in w
// within alloc.RetryShort of now.
func (w *winState) refused(now time.Time) bool {
	return !w.full.IsZero() && now.Sub(w.full) < alloc.RetryShort
}
