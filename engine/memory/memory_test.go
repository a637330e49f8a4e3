package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func inc(b *memory.Backend, keys ...string) ([]engine.CounterOp, error) {
	batch := make([]engine.CounterOp, len(keys))
	for i, k := range keys {
		batch[i] = engine.Add(k, 1, time.Minute)
	}
	return batch, b.Exec(context.Background(), batch)
}

// New counters beyond the bound fail with a clear error and change nothing;
// counters already held keep counting; expired ones make room again.
func TestBudget(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313464, 0))
	budget := memory.NewBudget(10 << 10)
	a := memory.NewWithOptions(memory.Options{Clock: clk.Now, Budget: budget})
	b := memory.NewWithOptions(memory.Options{Clock: clk.Now, Budget: budget}) // another shard, same budget
	defer a.Close()
	defer b.Close()
	var held int
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		be := a
		if i%2 == 1 {
			be = b
		}
		if _, err = inc(be, fmt.Sprintf("domain_key_value_%04d_1795313460", i)); err == nil {
			held++
		}
	}
	if !errors.Is(err, memory.ErrFull) || !strings.Contains(err.Error(), "SLUICE_MEMORY_MAX_BYTES") {
		t.Fatalf("no clear error once full: %v", err)
	}
	if budget.Used() > budget.Max() || held == 0 || held > 200 {
		t.Fatalf("%d counters use %d of %d bytes", held, budget.Used(), budget.Max())
	}
	// A failed batch applies nothing, not even its known keys.
	if _, err := inc(a, "domain_key_value_0000_1795313460", "brand_new_key"); !errors.Is(err, memory.ErrFull) {
		t.Fatalf("a batch with a new key while full: %v", err)
	}
	got, err := inc(a, "domain_key_value_0000_1795313460")
	if err != nil || got[0].After != 2 {
		t.Fatalf("a held counter while full: %v, after %d (want 2: the failed batch must not count)", err, got[0].After)
	}
	clk.Add(2 * time.Minute) // every window ended
	if _, err := inc(a, "after_the_windows"); err != nil {
		t.Fatalf("expired counters did not make room: %v", err)
	}
	a.Close()
	b.Close()
	if budget.Used() != 0 {
		t.Errorf("closed backends still charge %d bytes", budget.Used())
	}
}

// Expired windows are dropped with no request at all.
func TestIdleSweep(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313464, 0))
	budget := memory.NewBudget(1 << 20)
	b := memory.NewWithOptions(memory.Options{Clock: clk.Now, Budget: budget, SweepEvery: 5 * time.Millisecond})
	defer b.Close()
	for i := 0; i < 100; i++ {
		if _, err := inc(b, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 100 || budget.Used() == 0 {
		t.Fatalf("held %d, charged %d", b.Len(), budget.Used())
	}
	clk.Add(2 * time.Minute)
	testenv.Eventually(t, "expired counters dropped with no traffic", func() bool { return b.Len() == 0 && budget.Used() == 0 })
}

func TestKeyLimit(t *testing.T) {
	b := memory.NewWithOptions(memory.Options{MaxKeyBytes: 100})
	defer b.Close()
	if err := b.ValidateKey(strings.Repeat("k", 100)); err != nil {
		t.Errorf("a key at the limit: %v", err)
	}
	err := b.ValidateKey(strings.Repeat("k", 101))
	if err == nil || !strings.Contains(err.Error(), "101 bytes is over the limit of 100 bytes") {
		t.Errorf("a key over the limit: %v", err)
	}
	if err := memory.KeyLimit(memory.DefaultMaxKeyBytes).ValidateKey(strings.Repeat("k", memory.DefaultMaxKeyBytes+1)); err == nil {
		t.Error("default limit not enforced")
	}
}

// Reads and bucket steps that store nothing are not charged; a key that
// comes twice in a batch (two kinds) is charged once.
func TestBudgetChargesOnlyStoredCounters(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313464, 0))
	budget := memory.NewBudget(1 << 20)
	b := memory.NewWithOptions(memory.Options{Clock: clk.Now, Budget: budget})
	defer b.Close()
	batch := []engine.CounterOp{engine.Get("read-only")}
	if err := b.Exec(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if budget.Used() != 0 || b.Len() != 0 {
		t.Fatalf("a read of a missing counter charged %d bytes, holds %d", budget.Used(), b.Len())
	}
	batch = []engine.CounterOp{engine.Get("k"), engine.Add("k", 1, time.Minute)}
	if err := b.Exec(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	one := budget.Used()
	if _, err := inc(b, "k2"); err != nil {
		t.Fatal(err)
	}
	// "k" and "k2" take the same 8-byte allocation: the same charge.
	if one == 0 || budget.Used() != 2*one {
		t.Errorf("charges: %d for k (twice in its batch), %d with k2", one, budget.Used())
	}
}
