package lease_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// TestFleetNeverOverOnMemory: three replicas on one store, 20,000
// decisions at once on a key limited to 10,000: between 9,900 and 10,000
// are admitted, for every algorithm, with and without an exact replica.
func TestFleetNeverOverOnMemory(t *testing.T) {
	for _, alg := range []string{"fixed", "sliding", "bucket"} {
		for _, modes := range [][]string{{"lease", "lease", "lease"}, {"lease", "lease", "exact"}} {
			t.Run(alg+"/"+modes[2], func(t *testing.T) {
				clk := &clock{t: time.Unix(1795313464, 0)}
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
