package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/transport"
)

// TestRateLimitAppliesGCHeapFloor: the command applies
// SLUICE_GC_HEAP_FLOOR_MIB while the server runs and lifts it after.
func TestRateLimitAppliesGCHeapFloor(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app", "config"), 0o755)
	os.WriteFile(filepath.Join(root, "app", "config", "r.yaml"),
		[]byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	env := transport.FromMap(map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "USE_STATSD": "false", "DISABLE_STATS": "true", "LOG_LEVEL": "error",
		"SLUICE_GC_HEAP_FLOOR_MIB": "48",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl, err := startRateLimit(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- rl.run(ctx, ready) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	if got := gcfloor.Floor(); got != 48<<20 {
		t.Errorf("while serving the heap floor is %d bytes, want 48 MiB", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := gcfloor.Floor(); got != 0 {
		t.Errorf("after the server stopped the heap floor is %d bytes, want none", got)
	}
}
