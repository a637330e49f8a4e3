package main

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/settings"
)

// TestRateLimitAppliesGCHeapFloor: the command applies
// SLUICE_GC_HEAP_FLOOR_MIB while the server runs and lifts it after.
func TestRateLimitAppliesGCHeapFloor(t *testing.T) {
	env := serverEnv(t, map[string]string{"LOG_LEVEL": "error", "SLUICE_GC_HEAP_FLOOR_MIB": "48"},
		"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl, err := startRateLimit(ctx, settings.FromMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- rl.run(ctx, ready) }()
	waitStarted(t, ready, done)
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
