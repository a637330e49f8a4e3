package memory

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

func TestOpGet(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(func() time.Time { return now })
	defer b.Close()
	ctx := context.Background()
	if err := b.Exec(ctx, []engine.CounterOp{engine.Add("k", 4, 10*time.Second)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		advance time.Duration
		batch   []engine.CounterOp
		want    []uint64
	}{
		{"read", 0, []engine.CounterOp{{Key: "k", Kind: engine.OpGet, Hits: 9, TTL: time.Hour}}, []uint64{4}},
		{"missing reads 0", 0, []engine.CounterOp{engine.Get("none")}, []uint64{0}},
		{"read then add then read", 0, []engine.CounterOp{
			engine.Get("k"), engine.Add("k", 1, 10*time.Second), engine.Get("k"),
		}, []uint64{4, 5, 5}},
		// The read above did not extend the TTL to an hour: the add at 1000s
		// set it to 1010s.
		{"expired reads 0", 10 * time.Second, []engine.CounterOp{engine.Get("k")}, []uint64{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now = now.Add(tc.advance)
			if err := b.Exec(ctx, tc.batch); err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.want {
				if tc.batch[i].After != w {
					t.Fatalf("op %d After = %d, want %d", i, tc.batch[i].After, w)
				}
			}
		})
	}
	if b.Len() != 1 {
		t.Fatalf("%d counters held, want 1: reads must not create keys", b.Len())
	}
}
