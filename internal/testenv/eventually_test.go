package testenv

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventually(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	Eventually(t, "the third poll", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3", got)
	}
}

// TestEventuallyFailsLoudly: a condition that never holds fails the test
// with what was awaited, once the bound has passed.
func TestEventuallyFailsLoudly(t *testing.T) {
	t.Parallel()
	f := &fatalTB{TB: t}
	start := time.Now()
	EventuallyWithin(f, 20*time.Millisecond, "nothing", func() bool { return false })
	if f.msg == "" || !strings.Contains(f.msg, "nothing") {
		t.Fatalf("Fatalf got %q, want a message naming what was awaited", f.msg)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("gave up before the bound")
	}
}
