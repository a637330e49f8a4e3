package memcache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkExec measures Exec (one GetMulti, increments
// queued) against a local memcached, by batch size. Once the queue is full
// the batch waits for the workers, so keys/s is the sustained rate including
// the background increments.
func BenchmarkExec(b *testing.B) {
	m := testenv.StartMemcached(b)
	o := options(m.Addr)
	o.HealthCheckInterval = time.Second
	be := newBackend(b, o)
	ctx := context.Background()
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			batch := make([]engine.CounterOp, n)
			for i := range batch {
				batch[i] = engine.CounterOp{Key: fmt.Sprintf("bench_%d_%d", n, i), Hits: 1, TTL: time.Minute}
			}
			b.ReportAllocs()
			calls := 0
			for b.Loop() {
				if err := be.Exec(ctx, batch); err != nil {
					b.Fatal(err)
				}
				calls++
			}
			b.ReportMetric(float64(calls*n)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
