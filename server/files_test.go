package server_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// With RUNTIME_WATCH_ROOT=false, a config directory deleted and created again
// (or one that did not exist at start) is watched again: rules written into
// the new directory load without a restart.
func TestFileSourceRecreatedDirectory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove string // relative to RUNTIME_ROOT: what is deleted
	}{
		{"config directory", "app/config"},
		{"its parent too", "app"},
		{"missing at start", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "app", "config")
			if tc.remove != "" {
				write(t, dir, "a.yaml", "domain: first\n")
			}
			src := server.NewFileSource(settings.ConfigSettings{RuntimeRoot: root, Subdirectory: "app", AppDirectory: "config"},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			ctx, cancel := context.WithCancel(context.Background())
			events := make(chan server.ConfigEvent)
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, events) }()
			defer func() {
				cancel()
				for range events { // Run closes it on return
				}
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			waitEvent := func(what string, ok func(server.ConfigEvent) bool) {
				t.Helper()
				deadline := time.After(10 * time.Second)
				for {
					select {
					case ev := <-events:
						if ok(ev) {
							return
						}
					case <-deadline:
						t.Fatalf("no configuration event with %s", what)
					}
				}
			}
			if tc.remove != "" {
				waitEvent("the first rules", func(ev server.ConfigEvent) bool { return names(ev) == "a.yaml" })
				if err := os.RemoveAll(filepath.Join(root, tc.remove)); err != nil {
					t.Fatal(err)
				}
				waitEvent("the directory gone", func(ev server.ConfigEvent) bool { return ev.Err != nil })
			} else {
				waitEvent("the directory missing", func(ev server.ConfigEvent) bool { return ev.Err != nil })
			}
			// Twice: the second time proves the new directory itself is watched.
			write(t, dir, "b.yaml", "domain: second\n")
			waitEvent("the new directory's rules", func(ev server.ConfigEvent) bool { return ev.Err == nil && names(ev) == "b.yaml" })
			write(t, dir, "c.yaml", "domain: third\n")
			waitEvent("a file added to the new directory", func(ev server.ConfigEvent) bool { return names(ev) == "b.yaml c.yaml" })
		})
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(ev server.ConfigEvent) string {
	var n []string
	for _, f := range ev.Files {
		n = append(n, f.Name)
	}
	return strings.Join(n, " ")
}

// With RUNTIME_WATCH_ROOT=false, a rule file moved out of the config
// directory (a rename, which fsnotify reports as Rename, not Remove) drops
// its domain at the next reload, as a deleted file does.
func TestFileSourceFileMovedOut(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	write(t, dir, "a.yaml", "domain: a\n")
	write(t, dir, "b.yaml", "domain: b\n")
	src := server.NewFileSource(settings.ConfigSettings{RuntimeRoot: root, Subdirectory: "app", AppDirectory: "config"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan server.ConfigEvent)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, events) }()
	defer func() {
		cancel()
		for range events {
		}
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFiles := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Err == nil && names(ev) == want {
					return
				}
			case <-deadline:
				t.Fatalf("no configuration event with the files %q", want)
			}
		}
	}
	waitFiles("a.yaml b.yaml")
	if err := os.Rename(filepath.Join(dir, "b.yaml"), filepath.Join(root, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFiles("a.yaml")
	// Moved back in: a Create, as before.
	if err := os.Rename(filepath.Join(root, "b.yaml"), filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFiles("a.yaml b.yaml")
}

// A FIFO among the rule files (zz.yaml) is skipped with a warning: opening
// or reading it used to block the load, and with it SIGTERM, for good.
func TestFileSourceSkipsFIFO(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	write(t, dir, "a.yaml", "domain: first\n")
	if err := syscall.Mkfifo(filepath.Join(dir, "zz.yaml"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	var log strings.Builder
	src := server.NewFileSource(settings.ConfigSettings{RuntimeRoot: root, Subdirectory: "app", AppDirectory: "config"},
		slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil)))
	type loaded struct {
		files []engine.ConfigFile
		err   error
	}
	done := make(chan loaded, 1)
	go func() { files, err := src.Load(); done <- loaded{files, err} }()
	select {
	case l := <-done:
		if l.err != nil || len(l.files) != 1 || l.files[0].Name != "a.yaml" {
			t.Fatalf("Load: %v, %d files", l.err, len(l.files))
		}
	case <-time.After(30 * time.Second):
		// Unblock the reader so that the test can end.
		if f, err := os.OpenFile(filepath.Join(dir, "zz.yaml"), os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load blocked on a FIFO")
	}
	if !strings.Contains(log.String(), "not a regular file") {
		t.Fatalf("no warning about the FIFO: %q", log.String())
	}
}

// Rule files larger than SLUICE_CONFIG_MAX_BYTES together fail the load
// (the rules in use stay); at the cap they load.
func TestFileSourceSizeCap(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	body := "domain: d\n# " + strings.Repeat("x", 100) + "\n"
	write(t, dir, "a.yaml", body)
	write(t, dir, "b.yaml", strings.Replace(body, "domain: d", "domain: e", 1))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := settings.ConfigSettings{RuntimeRoot: root, Subdirectory: "app", AppDirectory: "config", MaxBytes: int64(2 * len(body))}
	if files, err := server.NewFileSource(cfg, quiet).Load(); err != nil || len(files) != 2 {
		t.Fatalf("at the cap: %v, %d files", err, len(files))
	}
	cfg.MaxBytes--
	_, err := server.NewFileSource(cfg, quiet).Load()
	if err == nil || !strings.Contains(err.Error(), "SLUICE_CONFIG_MAX_BYTES") {
		t.Fatalf("a byte over the cap: %v", err)
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
