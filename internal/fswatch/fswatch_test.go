package fswatch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/fswatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func watch(t *testing.T) (string, *fsnotify.Watcher) {
	t.Helper()
	dir := t.TempDir()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	return dir, w
}

// TestSettledRunsAfterRelevantEvents: a relevant change leads to a settled
// call; a closed watcher ends the loop.
func TestSettledRunsAfterRelevantEvents(t *testing.T) {
	dir, w := watch(t)
	settledCalls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fswatch.Settled(context.Background(), w, time.Millisecond,
			func(ev fsnotify.Event) bool { return filepath.Base(ev.Name) == "relevant" },
			func() bool { settledCalls <- struct{}{}; return true },
			func(error) {})
	}()
	if err := os.WriteFile(filepath.Join(dir, "ignored"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "relevant"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settledCalls:
	case <-time.After(10 * time.Second):
		t.Fatal("no settled call after a relevant change")
	}
	w.Close() // a closed watcher ends the loop
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Settled did not return when the watcher closed")
	}
}

func TestSettledFalseEndsTheLoop(t *testing.T) {
	dir, w := watch(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fswatch.Settled(context.Background(), w, time.Millisecond,
			func(fsnotify.Event) bool { return true }, func() bool { return false }, func(error) {})
	}()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Settled went on after settled returned false")
	}
}

func TestSettledEndsWithContext(t *testing.T) {
	_, w := watch(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fswatch.Settled(ctx, w, time.Millisecond, func(fsnotify.Event) bool { return true }, func() bool { return true },
			func(err error) { t.Error(errors.Join(errors.New("unexpected watcher error"), err)) })
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Settled did not return when ctx ended")
	}
}
