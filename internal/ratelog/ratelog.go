package ratelog

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often a repeated warning is logged at most.
const DefaultInterval = 10 * time.Second

// Warner logs one message at WARN level at most once per interval, with
// how many times it happened in between. Its zero value is not usable; make
// one with New. Close reports what is still counted.
type Warner struct {
	log   *slog.Logger
	msg   string
	every time.Duration
	// now and afterFunc are the clock: time.Now and time.AfterFunc, or a
	// test's simulated clock, so that what lands in one interval does not
	// depend on how fast the caller runs.
	now       func() time.Time
	afterFunc func(time.Duration, func()) stopper

	mu         sync.Mutex
	logged     time.Time // when the last line was written
	suppressed int       // occurrences since then, not yet reported
	lastErr    string
	timer      stopper // pending report of the suppressed ones
	closed     bool
}

// New returns a Warner of msg; every <= 0 means DefaultInterval.
func New(log *slog.Logger, msg string, every time.Duration) *Warner {
	if every <= 0 {
		every = DefaultInterval
	}
	return &Warner{log: log, msg: msg, every: every, now: time.Now, afterFunc: afterFunc}
}

// stopper is the part of a *time.Timer a Warner uses.
type stopper interface{ Stop() bool }

func afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// Warn records one occurrence of the message with its error and attributes.
// The first one of an interval is logged at once, with its attributes; the
// rest are counted.
func (w *Warner) Warn(err error, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if w.closed || w.logged.IsZero() || now.Sub(w.logged) >= w.every && w.suppressed == 0 {
		w.logged = now
		w.log.Warn(w.msg+": "+errText(err), args...)
		return
	}
	w.suppressed++
	w.lastErr = errText(err)
	if w.timer == nil {
		w.timer = w.afterFunc(w.every-now.Sub(w.logged), w.report)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// report writes the line for the occurrences counted in the interval.
func (w *Warner) report() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	w.flushLocked()
}

func (w *Warner) flushLocked() {
	if w.suppressed == 0 {
		return
	}
	w.log.Warn(fmt.Sprintf("%s: %d more times in the last %s; the last: %s", w.msg, w.suppressed, w.every, w.lastErr),
		"repeated", w.suppressed)
	w.logged, w.suppressed, w.lastErr = w.now(), 0, ""
}

// Close reports what is still counted and stops the pending report. Later
// occurrences are logged one line each.
func (w *Warner) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.flushLocked()
	w.closed = true
}
