package ratelog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

type buf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buf) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// fakeClock is a simulated clock for a Warner: time moves only in advance,
// which runs the timers that come due, so what falls in one interval does
// not depend on how fast the test runs.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the clock by d and runs the timers due by then.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	rest := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// newFake returns a Warner of msg writing to out on a simulated clock.
func newFake(out *buf, msg string, every time.Duration) (*Warner, *fakeClock) {
	c := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := New(slog.New(slog.NewTextHandler(out, nil)), msg, every)
	w.now, w.afterFunc = c.Now, c.AfterFunc
	return w, c
}

// A burst of the same failure is one line at once and one line with the
// count when the interval ends, not a line per failure. The clock is
// simulated: however long the loop takes, all of it falls in one interval.
func TestWarnerBurst(t *testing.T) {
	out := &buf{}
	w, clock := newFake(out, "error", 100*time.Millisecond)
	const n = 10000
	for i := 0; i < n; i++ {
		w.Warn(fmt.Errorf("backend down %d", i), "backend", "memcache")
	}
	if l := out.lines(); len(l) != 1 {
		t.Fatalf("%d lines before the interval ended, want 1: %q", len(l), l)
	}
	clock.advance(100*time.Millisecond - time.Nanosecond)
	if l := out.lines(); len(l) != 1 {
		t.Fatalf("a report before the interval ended: %q", l)
	}
	clock.advance(time.Nanosecond)
	l := out.lines()
	if len(l) != 2 {
		t.Fatalf("%d lines for %d failures, want 2: %q", len(l), n, l)
	}
	if !strings.Contains(l[0], `msg="error: backend down 0"`) || !strings.Contains(l[0], "backend=memcache") {
		t.Errorf("first line %q", l[0])
	}
	if !strings.Contains(l[1], fmt.Sprintf("%d more times in the last 100ms; the last: backend down %d", n-1, n-1)) || !strings.Contains(l[1], fmt.Sprintf("repeated=%d", n-1)) {
		t.Errorf("report line %q", l[1])
	}
	w.Close()
	if got := len(out.lines()); got != 2 {
		t.Errorf("Close with nothing counted wrote a line: %q", out.lines())
	}
}

// Failures that go on past the report are counted for the next interval:
// one report line per interval, each with that interval's count.
func TestWarnerConsecutiveIntervals(t *testing.T) {
	out := &buf{}
	w, clock := newFake(out, "e", time.Second)
	for i := 0; i < 10; i++ {
		w.Warn(fmt.Errorf("a%d", i))
	}
	clock.advance(time.Second)
	for i := 0; i < 5; i++ {
		w.Warn(fmt.Errorf("b%d", i))
	}
	clock.advance(999 * time.Millisecond)
	if l := out.lines(); len(l) != 2 {
		t.Fatalf("the second interval reported early: %q", l)
	}
	clock.advance(time.Millisecond)
	l := out.lines()
	if len(l) != 3 || !strings.Contains(l[1], "9 more times in the last 1s; the last: a9") ||
		!strings.Contains(l[2], "5 more times in the last 1s; the last: b4") {
		t.Fatalf("lines %q", l)
	}
	w.Close()
}

// On the real clock every occurrence is accounted for, as its own line or
// in a report, however the scheduler spaces them: the count is checked, not
// how many lines a given speed makes.
func TestWarnerRealClock(t *testing.T) {
	out := &buf{}
	w := New(slog.New(slog.NewTextHandler(out, nil)), "e", 10*time.Millisecond)
	defer w.Close()
	const n = 100
	for i := 0; i < n; i++ {
		w.Warn(fmt.Errorf("x%d", i))
	}
	count := func() int {
		total := 0
		for _, l := range out.lines() {
			var k int
			if i := strings.Index(l, "repeated="); i >= 0 {
				fmt.Sscanf(l[i:], "repeated=%d", &k)
				total += k
			} else if l != "" {
				total++
			}
		}
		return total
	}
	testenv.Eventually(t, "every occurrence reported", func() bool { return count() == n })
}

// Close reports what is counted; a single failure after a quiet interval is
// logged at once.
func TestWarnerCloseAndQuiet(t *testing.T) {
	out := &buf{}
	w := New(slog.New(slog.NewTextHandler(out, nil)), "decision failed", time.Hour)
	w.Warn(errors.New("a"))
	w.Warn(errors.New("b"))
	w.Warn(errors.New("c"))
	w.Close()
	l := out.lines()
	if len(l) != 2 || !strings.Contains(l[1], "2 more times in the last 1h0m0s; the last: c") {
		t.Fatalf("lines %q", l)
	}
	w.Warn(errors.New("after close"))
	if l := out.lines(); len(l) != 3 || !strings.Contains(l[2], "after close") {
		t.Fatalf("after Close: %q", l)
	}

	out2 := &buf{}
	q := New(slog.New(slog.NewTextHandler(out2, nil)), "e", 20*time.Millisecond)
	q.Warn(errors.New("one"))
	q.logged = q.logged.Add(-time.Second) // an interval passed with nothing counted
	q.Warn(errors.New("two"))
	if l := out2.lines(); len(l) != 2 || !strings.Contains(l[1], "e: two") {
		t.Fatalf("a failure after a quiet interval: %q", l)
	}
	q.Close()
}
