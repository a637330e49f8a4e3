package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/lease"
)

// hungBackend answers no call until its context ends.
type hungBackend struct{}

func (hungBackend) Exec(ctx context.Context, _ []engine.CounterOp) error {
	<-ctx.Done()
	return ctx.Err()
}
func (hungBackend) Close() error { return nil }

// TestDefaultWaitBound covers the tight production bounds the count tests
// raise (callTimeout): with the defaults a decision waits 1 s for a
// reservation from a store that does not answer, then fails with a deadline
// error; the bound is the larger of the lease's and the next counter's.
func TestDefaultWaitBound(t *testing.T) {
	lc, err := lease.New(engine.DirectCounter{Backend: hungBackend{}}, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if got := lc.WaitBound(); got != time.Second {
		t.Fatalf("WaitBound %v, want the 1s default", got)
	}
	router, err := actors.New(actors.Options{Shards: 1, CallTimeout: 3 * time.Second, Backend: func(int) engine.Backend { return hungBackend{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	over, err := lease.New(router, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if got := over.WaitBound(); got != 3*time.Second {
		t.Fatalf("WaitBound over a router of 3s calls: %v, want 3s", got)
	}

	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(rulesYAML)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := engine.DefaultOptions()
	o.Counter, o.Counting = lc, engine.CountLease
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	start := time.Now()
	_, err = svc.ShouldRateLimit(context.Background(), request("fixed"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("decision on a hung store: %v, want a deadline error", err)
	}
	// Only the lower end is checked: a loaded machine answers later.
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("gave up after %v, before the 1s default", waited)
	}
}
