package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestFleetNeverOverOnMemory: three replicas on one store, 20,000
// decisions at once on a key limited to 10,000: between 9,900 and 10,000
// are admitted, for every algorithm, with and without an exact replica.
func TestFleetNeverOverOnMemory(t *testing.T) {
	for _, alg := range []string{"fixed", "sliding", "bucket"} {
		for _, modes := range [][]string{{"lease", "lease", "lease"}, {"lease", "lease", "exact"}} {
			t.Run(alg+"/"+modes[2], func(t *testing.T) {
				clk := testenv.NewClock(time.Unix(1795313464, 0))
				store := memory.New(clk.Now)
				rs := fleet(t, rulesYAML, func() engine.Counter { return engine.DirectCounter{Backend: store} }, clk.Now, modes...)
				ok := storm(t, rs, alg, 20000, []int{1, 1, 1})
				if n := sum(ok); n < 9900 || n > 10000 {
					t.Fatalf("%d admitted (per replica %v), want 9,900 … 10,000", n, ok)
				}
				t.Logf("admitted %d: %v", sum(ok), ok)
			})
		}
	}
}

// TestReloadRaisesLimit: a key that reached its limit is answered over
// without a store call; once a reload raises the limit, the room the
// raise made is admitted, and no more.
func TestReloadRaisesLimit(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313464, 0))
	store := memory.New(clk.Now)
	rs := fleet(t, rulesYAML, func() engine.Counter { return engine.DirectCounter{Backend: store} }, clk.Now, "lease")
	if ok := storm(t, rs, "fixed", 10100, []int{1}); sum(ok) != 10000 {
		t.Fatalf("%d admitted under a limit of 10,000", sum(ok))
	}
	read := []engine.CounterOp{engine.Get("d_k_fixed_1795313460")}
	if err := store.Exec(context.Background(), read); err != nil {
		t.Fatal(err)
	}
	// The refused decisions counted past the limit, as exact counting
	// counts every refused hit; how far past depends on how the storm's
	// decisions were batched (direct or by reservation). The raise is set
	// from where the counter stands, so that it makes room for 50.
	const room = 50
	limit := int(read[0].After) + room
	raised, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(strings.Replace(rulesYAML, "requests_per_unit: 10000}\n  - key: k\n    value: sliding", fmt.Sprintf("requests_per_unit: %d}\n  - key: k\n    value: sliding", limit), 1))}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs[0].svc.SetConfig(raised)
	if ok := storm(t, rs, "fixed", 200, []int{1}); sum(ok) != room {
		t.Fatalf("%d admitted after the limit rose to %d (the counter stood at %d), want %d", sum(ok), limit, read[0].After, room)
	}
}
