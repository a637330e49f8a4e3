// Package tick runs the periodic background work of sluice's components
// (health pings, SRV refreshes, the memory backend's sweeper, the metrics
// flush) as one kind of loop, which its owner stops by closing a channel
// (or cancelling a context: ctx.Done()) and waits for.
package tick

import "time"

// Every calls fn at each tick of interval until stop is closed, then
// returns. fn runs on the caller's goroutine, one call at a time; ticks
// that come while fn runs are dropped, as a time.Ticker drops them.
func Every(stop <-chan struct{}, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fn()
		}
	}
}
