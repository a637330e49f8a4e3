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

// A burst of the same failure is one line at once and one line with the
// count when the interval ends, not a line per failure.
func TestWarnerBurst(t *testing.T) {
	out := &buf{}
	w := New(slog.New(slog.NewTextHandler(out, nil)), "error", 100*time.Millisecond)
	const n = 10000
	for i := 0; i < n; i++ {
		w.Warn(fmt.Errorf("backend down %d", i), "backend", "memcache")
	}
	testenv.Eventually(t, "a report of the repeated failures", func() bool { return len(out.lines()) >= 2 })
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
