package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
)

// t0 is 4 s into a minute window: 1795313464 % 60 == 4.
var t0 = time.Unix(1795313464, 0)

// backendCounter is engine.DirectCounter (the engine's tests do not need
// the actors layer, and engine must not import it) that also records its
// calls and can be made to fail.
type backendCounter struct {
	b     engine.Backend
	calls int
	// batchCalls counts the calls that carried a batch.
	batchCalls int
	ops        [][]engine.CounterOp
	err        error
	// invalid is the first operation that carried what its kind does not
	// use (CounterOp.Validate); newFixture fails the test on it.
	invalid error
	mu      sync.Mutex
}

func (c *backendCounter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	c.mu.Lock()
	if batch != nil {
		c.batchCalls++
	}
	c.calls++
	c.ops = append(c.ops, append([]engine.CounterOp(nil), ops...))
	for i := range ops {
		if err := ops[i].Validate(); err != nil && c.invalid == nil {
			c.invalid = err
		}
	}
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return engine.DirectCounter{Backend: c.b}.Apply(ctx, ops, batch)
}

type fixture struct {
	svc     *engine.Service
	clock   *testenv.Clock
	counter *backendCounter
	stats   *stats.Store
}

func newFixture(t *testing.T, mutate func(*engine.Options), files ...string) *fixture {
	t.Helper()
	clk := testenv.NewClock(t0)
	f := &fixture{clock: clk, counter: &backendCounter{b: memory.New(clk.Now)}, stats: stats.NewStore()}
	o := engine.DefaultOptions()
	o.Counter = f.counter
	o.Clock = clk.Now
	o.Stats = f.stats
	o.ExpirationJitterMax = 0
	if mutate != nil {
		mutate(&o)
	}
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	t.Cleanup(func() {
		f.counter.mu.Lock()
		defer f.counter.mu.Unlock()
		if f.counter.invalid != nil {
			t.Errorf("the engine sent an invalid operation: %v", f.counter.invalid)
		}
	})
	if len(files) > 0 {
		var cf []engine.ConfigFile
		for _, name := range files {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			cf = append(cf, engine.ConfigFile{Name: name, YAML: data})
		}
		cfg, err := svc.LoadConfig(cf, false)
		if err != nil {
			t.Fatal(err)
		}
		svc.SetConfig(cfg)
	}
	return f
}

func req(domain string, descs ...[]engine.Entry) *engine.Request {
	r := &engine.Request{Domain: domain}
	for _, d := range descs {
		r.Descriptors = append(r.Descriptors, engine.Descriptor{Entries: d})
	}
	return r
}

func kv(pairs ...string) []engine.Entry {
	var out []engine.Entry
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, engine.Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func (f *fixture) do(t *testing.T, r *engine.Request) *engine.Response {
	t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func u64(v uint64) *uint64 { return &v }

func newMemory(c *testenv.Clock) engine.Backend { return memory.New(c.Now) }
