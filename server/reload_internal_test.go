package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/settings"
)

// SIGTERM (Run's context ending) while a rule set is being parsed: Run
// returns without waiting for the parse, whose outcome is dropped. It used
// to wait for it: 285 s for a 41 MB rule file, past the 10 s drain.
func TestShutdownNeverWaitsForAParse(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte("domain: d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := settings.FromEnv(settings.FromMap(map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1",
		"GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "BACKEND_TYPE": "memory", "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app", "RUNTIME_WATCH_ROOT": "false"}))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(context.Background(), Options{Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	srv.loader.parse = func(files []engine.ConfigFile, merge bool) (*engine.Config, error) {
		close(entered)
		<-release // a parse that takes as long as the test likes
		return srv.svc.LoadConfig(files, merge)
	}
	defer func() { close(release); srv.loader.parses.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, nil) }()
	<-entered
	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run waited for a parse after SIGTERM")
	}
}
