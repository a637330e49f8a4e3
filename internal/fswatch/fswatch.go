// Package fswatch runs the event loop of an fsnotify watcher with settling.
// File changes come in bursts (an editor's write + chmod, a symlink swap's
// create + rename, Kubernetes replacing a mounted volume's ..data link), and
// one burst should be one reload, made once the files have stopped moving.
package fswatch

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Settled reads w until ctx ends or w is closed. Every event is shown to
// event, which returns whether it concerns the watched files; one that does
// (re)starts a timer of settle. When the timer fires, settled runs, and the
// loop stops if it returns false. Watcher errors go to onErr.
func Settled(ctx context.Context, w *fsnotify.Watcher, settle time.Duration,
	event func(fsnotify.Event) bool, settled func() bool, onErr func(error)) {
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if event(ev) {
				timer = time.After(settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			onErr(err)
		case <-timer:
			timer = nil
			if !settled() {
				return
			}
		}
	}
}
