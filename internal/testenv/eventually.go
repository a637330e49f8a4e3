package testenv

import "time"

// EventuallyBound is how long Eventually polls before it fails, and how
// long a test waits for anything that must happen: generous, because on a
// shared, loaded machine (make test-stress runs ten busy loops per CPU) a
// condition that is met in milliseconds when idle can take tens of seconds.
// Only a failing test waits this long.
const EventuallyBound = 2 * time.Minute

// Eventually polls cond until it holds, and fails the test (Fatalf) naming
// what it waited for if it does not within EventuallyBound. It never gives
// up silently: a caller that returns from it may rely on cond having held.
func Eventually(t TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, EventuallyBound, what, cond)
}

// EventuallyWithin is Eventually with a bound of the caller's, for waits
// that are themselves the subject of the test.
func EventuallyWithin(t TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: it did not happen", bound, what)
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}
