package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/lease"
)

// slidingPair is a leased sliding window's operation on cur and its read
// of prev, linked by label as the engine links them.
func slidingPair(cur, prev string, label uint32, at int64) (op, read engine.CounterOp) {
	op = engine.Add(cur, 1, 2*time.Minute)
	op.Lease = engine.LeaseTerms{Kind: engine.LeaseSliding, Pair: label, Limit: 100, UnitSec: 60, At: at}
	read = engine.Get(prev)
	read.Lease = engine.LeaseTerms{Kind: engine.LeaseSlidingPrev, Pair: label}
	return op, read
}

// TestSlidingPairByLabel: the lease layer finds a sliding window's read of
// the previous window by its pair label, not by its place: with the reads
// before their operations and an exact operation between them, each read
// still gets its own previous window's count, on a cold key (sent to the
// store) and a warm one (answered from the key's state). An operation
// without its read, or a read without its operation, is ErrBrokenPair.
func TestSlidingPairByLabel(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313464, 0))
	store := memory.New(clk.Now)
	ctx := context.Background()
	if err := store.Exec(ctx, []engine.CounterOp{engine.Add("a_prev", 30, time.Hour), engine.Add("b_prev", 7, time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(boundedDirect{engine.DirectCounter{Backend: store}}, lease.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	at := clk.Now().UnixMicro()
	opA, readA := slidingPair("a_cur", "a_prev", 1, at)
	opB, readB := slidingPair("b_cur", "b_prev", 2, at)
	exact := engine.Add("x", 1, time.Minute)

	orders := [][]engine.CounterOp{
		{readB, opA, exact, readA, opB}, // cold: each goes to the store direct
		{opB, readA, readB, opA},        // warm: answered from the states
		{readA, opB, opA, exact, readB},
	}
	for round, ops := range orders {
		if err := c.Apply(ctx, ops, nil); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, op := range ops {
			want, check := uint64(0), true
			switch op.Key {
			case "a_prev":
				want = 30
			case "b_prev":
				want = 7
			case "a_cur", "b_cur":
				want = uint64(round + 1) // one hit each round
			default:
				check = false
			}
			if check && op.After != want {
				t.Errorf("round %d: op %d (%s) answered %d, want %d", round, i, op.Key, op.After, want)
			}
		}
	}

	broken := map[string][]engine.CounterOp{
		"operation without its read": {opA},
		"read without its operation": {exact, readA},
		"labels that do not match":   {opA, readB},
	}
	for name, ops := range broken {
		if err := c.Apply(ctx, ops, nil); !errors.Is(err, engine.ErrBrokenPair) {
			t.Errorf("%s: error %v, want ErrBrokenPair", name, err)
		}
	}
}
