package actors_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle ends by itself after its period.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

// slowBackend is a network-like backend: it holds each call until released,
// records the batches it receives, and counts in memory.
type slowBackend struct {
	mem     *memory.Backend
	mu      sync.Mutex
	batches [][]engine.CounterOp
	gate    chan struct{} // a receive per call; nil = no wait
	fail    error
	calls   atomic.Int64
}

func (b *slowBackend) Exec(ctx context.Context, batch []engine.CounterOp) error {
	b.calls.Add(1)
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	b.batches = append(b.batches, append([]engine.CounterOp(nil), batch...))
	err := b.fail
	b.mu.Unlock()
	if err != nil {
		return err
	}
	return b.mem.Exec(ctx, batch)
}
func (b *slowBackend) Close() error { return nil }

// TestExactness: concurrent increments on one key each get a distinct count,
// so exactly `limit` of them are within the limit — through every backend kind.
// starvedCallTimeout is the call timeout of tests that check counts: a
// starved scheduler (a loaded CI machine) can hold a shard or a backend call
// for seconds, and a timed-out call would fail an exactness test for speed,
// not for a wrong count. The 1 s default is tested on its own
// (TestDefaultCallTimeout), the timeout's working by
// TestIncrementReturnsWithinCallTimeout.
const starvedCallTimeout = 2 * time.Minute

func TestExactness(t *testing.T) {
	const callers, limit = 20000, 10000
	for _, tc := range []struct {
		name     string
		backend  func() engine.Backend
		keys     int
		inFlight int
	}{
		{"memory one key", func() engine.Backend { return memory.New(nil) }, 1, 0},
		{"memory 1000 keys", func() engine.Backend { return memory.New(nil) }, 1000, 0},
		{"batched one key", func() engine.Backend { return &slowBackend{mem: memory.New(nil)} }, 1, 0},
		{"batched 1000 keys", func() engine.Backend { return &slowBackend{mem: memory.New(nil)} }, 1000, 0},
		{"4 calls in flight one key", func() engine.Backend { return &slowBackend{mem: memory.New(nil)} }, 1, 4},
		{"4 calls in flight 1000 keys", func() engine.Backend { return &slowBackend{mem: memory.New(nil)} }, 1000, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := tc.backend()
			_, isMem := shared.(*memory.Backend)
			r, err := actors.New(actors.Options{Shards: 8, MaxInFlight: tc.inFlight, CallTimeout: starvedCallTimeout, Backend: func(int) engine.Backend {
				if isMem {
					return tc.backend()
				}
				return shared
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			perKey := callers / tc.keys
			keyLimit := uint64(limit / tc.keys)
			var ok atomic.Int64
			seen := make([]sync.Map, tc.keys)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 512)
			for k := 0; k < tc.keys; k++ {
				for i := 0; i < perKey; i++ {
					wg.Add(1)
					sem <- struct{}{}
					go func(k int) {
						defer wg.Done()
						defer func() { <-sem }()
						ops := []engine.CounterOp{engine.Add(fmt.Sprintf("key-%d", k), 1, time.Minute)}
						if err := r.Apply(context.Background(), ops, nil); err != nil {
							t.Error(err)
							return
						}
						if _, dup := seen[k].LoadOrStore(ops[0].After, true); dup {
							t.Errorf("key %d: count %d handed out twice", k, ops[0].After)
						}
						if ops[0].After <= keyLimit {
							ok.Add(1)
						}
					}(k)
				}
			}
			wg.Wait()
			if got := ok.Load(); got != limit {
				t.Fatalf("%d within limit, want exactly %d", got, limit)
			}
		})
	}
}

// TestBatchingAndCoalescing: while one call is in flight, later increments
// wait and leave together, equal keys as one increment, and each waiter sees
// its own count in arrival order.
func TestBatchingAndCoalescing(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	results := make(chan uint64, 10)
	send := func(key string, hits uint64) {
		ops := []engine.CounterOp{engine.Add(key, hits, time.Minute)}
		if err := r.Apply(context.Background(), ops, nil); err != nil {
			t.Error(err)
		}
		results <- ops[0].After
	}
	go send("hot", 1) // first: goes out alone and blocks in the backend
	testenv.Eventually(t, "backend calls == 1", func() bool { return b.calls.Load() == 1 })
	// These arrive while the first call is in flight, one at a time so that
	// their arrival order is known.
	for i, h := range []uint64{2, 3, 5} {
		go send("hot", h)
		testenv.Eventually(t, "pending == i+1", func() bool { return r.Pending(0) == i+1 })
	}
	go send("cold", 7)
	testenv.Eventually(t, "pending == 4", func() bool { return r.Pending(0) == 4 })
	b.gate <- struct{}{} // release the first call
	b.gate <- struct{}{} // and the batch
	got := map[uint64]bool{}
	for i := 0; i < 5; i++ {
		got[<-results] = true
	}
	for _, want := range []uint64{1, 3, 6, 11, 7} {
		if !got[want] {
			t.Errorf("missing count %d in %v", want, got)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.batches) != 2 || len(b.batches[1]) != 2 || b.batches[1][0].Hits != 10 {
		t.Fatalf("batches %+v: want the second to be hot+10 and cold+7", b.batches)
	}
}

// TestGroupCommit: with ParallelMin 1 every decision leaves at once, each
// in its own call, while fewer than MaxInFlight calls are out; only then do
// they pile up, and the pile leaves as one batch when any call ends.
func TestGroupCommit(t *testing.T) {
	const inFlight = 3
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, MaxInFlight: inFlight, Batch: actors.BatchPolicy{ParallelMin: 1}, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	results := make(chan uint64, 10)
	send := func(key string) {
		ops := []engine.CounterOp{engine.Add(key, 1, time.Minute)}
		if err := r.Apply(context.Background(), ops, nil); err != nil {
			t.Error(err)
		}
		results <- ops[0].After
	}
	for i := 1; i <= inFlight; i++ {
		go send("hot")
		// Each is sent without waiting for the calls already out.
		testenv.Eventually(t, "backend calls == i && pending == 0", func() bool { return b.calls.Load() == int64(i) && r.Pending(0) == 0 })
	}
	for i := 1; i <= 4; i++ {
		go send("hot")
		testenv.Eventually(t, "pending == i", func() bool { return r.Pending(0) == i })
	}
	if got := b.calls.Load(); got != inFlight {
		t.Fatalf("%d calls with %d allowed in flight", got, inFlight)
	}
	b.gate <- struct{}{} // one call ends: the pile leaves as one call
	testenv.Eventually(t, "backend calls == in flight+1 && pending == 0", func() bool { return b.calls.Load() == inFlight+1 && r.Pending(0) == 0 })
	for i := 0; i < inFlight; i++ {
		b.gate <- struct{}{}
	}
	got := map[uint64]bool{}
	for i := 0; i < inFlight+4; i++ {
		got[<-results] = true
	}
	for want := uint64(1); want <= inFlight+4; want++ {
		if !got[want] {
			t.Errorf("missing count %d in %v: counts must be distinct and complete", want, got)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.batches); n != inFlight+1 {
		t.Fatalf("%d calls, want %d", n, inFlight+1)
	}
	var coalesced bool
	for _, batch := range b.batches {
		coalesced = coalesced || (len(batch) == 1 && batch[0].Hits == 4)
	}
	if !coalesced {
		t.Fatalf("batches %+v: want the four that piled up as one increment of 4", b.batches)
	}
}

// TestParallelMin: the first decision leaves at once; while its call is out,
// a second call leaves only when ParallelMin keys have piled up, and the
// rest leave together when a call returns.
func TestParallelMin(t *testing.T) {
	const parallelMin = 5
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, MaxInFlight: 4, Batch: actors.BatchPolicy{ParallelMin: parallelMin}, CallTimeout: time.Minute, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	var wg sync.WaitGroup
	send := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Apply(context.Background(), []engine.CounterOp{engine.Add(key, 1, time.Minute)}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	send("k0")
	testenv.Eventually(t, "backend calls == 1", func() bool { return b.calls.Load() == 1 })
	for i := 1; i < parallelMin; i++ {
		send(fmt.Sprintf("k%d", i))
		testenv.Eventually(t, "pending == i", func() bool { return r.Pending(0) == i })
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("%d calls with %d keys waiting: a call under ParallelMin must wait for the call out", got, parallelMin-1)
	}
	send(fmt.Sprintf("k%d", parallelMin))
	testenv.Eventually(t, "backend calls == 2 && pending == 0", func() bool { return b.calls.Load() == 2 && r.Pending(0) == 0 })
	send("late")
	testenv.Eventually(t, "pending == 1", func() bool { return r.Pending(0) == 1 })
	b.gate <- struct{}{} // a call returns: the one waiting leaves
	testenv.Eventually(t, "backend calls == 3 && pending == 0", func() bool { return b.calls.Load() == 3 && r.Pending(0) == 0 })
	b.gate <- struct{}{}
	b.gate <- struct{}{}
	wg.Wait()

	b.mu.Lock()
	defer b.mu.Unlock()
	var sizes []int
	for _, batch := range b.batches {
		sizes = append(sizes, len(batch))
	}
	sort.Ints(sizes)
	if want := []int{1, 1, parallelMin}; !slices.Equal(sizes, want) {
		t.Fatalf("batch sizes %v, want %v", sizes, want)
	}
}

func TestPerSecondLane(t *testing.T) {
	main := &slowBackend{mem: memory.New(nil)}
	sec := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 2,
		Backend:   func(int) engine.Backend { return main },
		PerSecond: func(int) engine.Backend { return sec }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ops := []engine.CounterOp{engine.Add("m", 1, time.Minute), {Key: "s", Hits: 1, TTL: time.Second, PerSecond: true}}
	if err := r.Apply(context.Background(), ops, nil); err != nil {
		t.Fatal(err)
	}
	if main.batches[0][0].Key != "m" || sec.batches[0][0].Key != "s" || len(main.batches) != 1 || len(sec.batches) != 1 {
		t.Fatalf("main %+v, per-second %+v", main.batches, sec.batches)
	}
}

func TestBackendErrorReachesEveryWaiter(t *testing.T) {
	boom := errors.New("boom")
	b := &slowBackend{mem: memory.New(nil), fail: boom}
	r, err := actors.New(actors.Options{Shards: 2, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := r.Apply(context.Background(), []engine.CounterOp{{Key: fmt.Sprint(i % 3), Hits: 1}, {Key: "x", Hits: 1}}, nil)
			if !errors.Is(err, boom) {
				t.Errorf("got %v", err)
			}
		}(i)
	}
	wg.Wait()
}

func TestShutdownAnswersEveryWaiter(t *testing.T) {
	for _, inFlight := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d in flight", inFlight), func(t *testing.T) {
			testShutdownAnswersEveryWaiter(t, inFlight)
		})
	}
}

func testShutdownAnswersEveryWaiter(t *testing.T, inFlight int) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, MaxInFlight: inFlight, Batch: actors.BatchPolicy{ParallelMin: 1}, Backend: func(int) engine.Backend { return b }, CallTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func() { errs <- r.Apply(context.Background(), []engine.CounterOp{{Key: "k", Hits: 1}}, nil) }()
	}
	testenv.Eventually(t, "backend calls == in flight && pending == 20-in flight", func() bool { return b.calls.Load() == int64(inFlight) && r.Pending(0) == 20-inFlight })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var closed, cancelled int
	for i := 0; i < 20; i++ {
		switch err := <-errs; {
		case errors.Is(err, actors.ErrClosed):
			closed++
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			cancelled++
		default:
			t.Errorf("unexpected answer %v", err)
		}
	}
	if closed != 20-inFlight || cancelled != inFlight {
		t.Fatalf("closed %d cancelled %d", closed, cancelled)
	}
	if err := r.Apply(context.Background(), []engine.CounterOp{{Key: "k"}}, nil); !errors.Is(err, actors.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestPipelineWindowAndLimit(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b },
		Batch: actors.BatchPolicy{Pipeline: actors.Pipeline{Window: 50 * time.Millisecond, MaxKeys: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	for i := 0; i < 7; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := r.Apply(context.Background(), []engine.CounterOp{{Key: fmt.Sprint(i), Hits: 1}}, nil); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	total := 0
	for _, batch := range b.batches {
		if len(batch) > 3 {
			t.Errorf("batch of %d keys exceeds the limit of 3", len(batch))
		}
		total += len(batch)
	}
	if total != 7 {
		t.Fatalf("%d keys sent, want 7", total)
	}
}

// TestPipelinePerLane: the main and the per-second backend each get their
// own window and key limit.
func TestPipelinePerLane(t *testing.T) {
	const hold = time.Hour // a window no test outlives: a held batch is never sent
	ops := func(perSecond bool, keys ...string) []engine.CounterOp {
		var out []engine.CounterOp
		for _, k := range keys {
			out = append(out, engine.CounterOp{Key: k, Hits: 1, PerSecond: perSecond})
		}
		return out
	}
	sizes := func(b *slowBackend) []int {
		b.mu.Lock()
		defer b.mu.Unlock()
		var n []int
		for _, batch := range b.batches {
			n = append(n, len(batch))
		}
		return n
	}
	for _, tc := range []struct {
		name                 string
		main, perSecond      actors.Pipeline
		wantMain, wantSecond []int // batch sizes each backend received
		mainHeld, secondHeld bool  // the lane's window holds its batch
	}{
		{name: "limit 1 on both lanes", main: actors.Pipeline{MaxKeys: 1}, perSecond: actors.Pipeline{MaxKeys: 1},
			wantMain: []int{1, 1, 1}, wantSecond: []int{1, 1, 1}},
		{name: "limits differ", main: actors.Pipeline{MaxKeys: 3}, perSecond: actors.Pipeline{MaxKeys: 1},
			wantMain: []int{3}, wantSecond: []int{1, 1, 1}},
		{name: "only the per-second lane has a limit", perSecond: actors.Pipeline{MaxKeys: 2},
			wantMain: []int{3}, wantSecond: []int{2, 1}},
		{name: "per-second window holds, main sends at once", perSecond: actors.Pipeline{Window: hold},
			wantMain: []int{3}, secondHeld: true},
		{name: "main window holds, per-second sends at once", main: actors.Pipeline{Window: hold},
			wantSecond: []int{3}, mainHeld: true},
		{name: "a full batch leaves before its window", main: actors.Pipeline{Window: hold, MaxKeys: 3}, perSecond: actors.Pipeline{Window: hold, MaxKeys: 1},
			wantMain: []int{3}, wantSecond: []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mainB, secB := &slowBackend{mem: memory.New(nil)}, &slowBackend{mem: memory.New(nil)}
			r, err := actors.New(actors.Options{Shards: 1, CallTimeout: 200 * time.Millisecond,
				Backend: func(int) engine.Backend { return mainB }, PerSecond: func(int) engine.Backend { return secB },
				Batch: actors.BatchPolicy{Pipeline: tc.main, PerSecondPipeline: tc.perSecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, lane := range []struct {
				perSecond, held bool
				b               *slowBackend
				want            []int
			}{{false, tc.mainHeld, mainB, tc.wantMain}, {true, tc.secondHeld, secB, tc.wantSecond}} {
				err := r.Apply(context.Background(), ops(lane.perSecond, "a", "b", "c"), nil)
				if lane.held {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("per-second %v: a batch held by its window answered %v, want the call timeout", lane.perSecond, err)
					}
				} else if err != nil {
					t.Errorf("per-second %v: %v", lane.perSecond, err)
				}
				if got := sizes(lane.b); !reflect.DeepEqual(got, lane.want) {
					t.Errorf("per-second %v: batches of %v keys, want %v", lane.perSecond, got, lane.want)
				}
			}
		})
	}
}

func TestContextCancelDoesNotBlockTheShard(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Apply(ctx, []engine.CounterOp{{Key: "k", Hits: 1}}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	close(b.gate)
	if err := r.Apply(context.Background(), []engine.CounterOp{{Key: "k", Hits: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// TestGivenUpCallLeavesOpsAlone: a call given up on returns while its
// operations still wait in a backend call, and its caller owns them again
// at once (a lease files a failed direct decision from them, the quota
// service reuses its buffer): the late answer must not be written into
// them. Under make test-stress a lease decision read its op while the
// shard wrote it, long after the call had timed out.
func TestGivenUpCallLeavesOpsAlone(t *testing.T) {
	for _, n := range []int{1, 3} { // one operation, and a grouped call
		t.Run(fmt.Sprint(n, " ops"), func(t *testing.T) {
			b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
			// One call out at a time: the next call leaves only once the
			// given-up one has been answered.
			r, err := actors.New(actors.Options{Shards: 1, MaxInFlight: 1, Backend: func(int) engine.Backend { return b }})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ops := make([]engine.CounterOp, n)
			for i := range ops {
				ops[i] = engine.Add(fmt.Sprint("k", i), 5, time.Minute)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := r.Apply(ctx, ops, nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("Apply with a cancelled context and a held backend = %v", err)
			}
			// The caller reuses its operations.
			const mine = 777
			for i := range ops {
				ops[i].After = mine
			}
			close(b.gate)
			next := []engine.CounterOp{engine.Add("k0", 1, time.Minute)}
			if err := r.Apply(context.Background(), next, nil); err != nil {
				t.Fatal(err)
			}
			if next[0].After != 6 {
				t.Fatalf("next call's count %d, want 6: the given-up call's 5 hits were applied first", next[0].After)
			}
			for i := range ops {
				if ops[i].After != mine {
					t.Fatalf("op %d: After %d, want the caller's %d: the given-up call wrote its answer into the caller's operations", i, ops[i].After, mine)
				}
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []actors.Options{
		{},
		{Backend: func(int) engine.Backend { return nil }, Shards: -1},
		{Backend: func(int) engine.Backend { return nil }, Batch: actors.BatchPolicy{Pipeline: actors.Pipeline{Window: -time.Second}}},
		{Backend: func(int) engine.Backend { return nil }, Batch: actors.BatchPolicy{Hold: -time.Second}},
	} {
		if _, err := actors.New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// panicky is an inline backend that panics on its first call: a bug in a
// shard must still answer the waiters, and the shard must keep working.
type panicky struct {
	mem      *memory.Backend
	panicked atomic.Bool
}

func (p *panicky) Exec(ctx context.Context, b []engine.CounterOp) error {
	if p.panicked.CompareAndSwap(false, true) {
		panic("bug in backend")
	}
	return p.mem.Exec(ctx, b)
}
func (p *panicky) Close() error { return nil }
func (p *panicky) Inline() bool { return true }

func TestShardRestartAnswersWaiters(t *testing.T) {
	p := &panicky{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return p }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Apply(ctx, []engine.CounterOp{{Key: "k", Hits: 1}}, nil); !errors.Is(err, actors.ErrShardRestarted) {
		t.Fatalf("first call: %v", err)
	}
	ops := []engine.CounterOp{{Key: "k", Hits: 1}}
	if err := r.Apply(ctx, ops, nil); err != nil || ops[0].After != 1 {
		t.Fatalf("after restart: %v, count %d", err, ops[0].After)
	}
}

// TestIncrementReturnsWithinCallTimeout: a caller without a deadline of its
// own is answered within the call timeout even when the backend hangs (the
// engine relies on it: WaitBound).
func TestIncrementReturnsWithinCallTimeout(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }, CallTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.WaitBound(); got != 50*time.Millisecond {
		t.Fatalf("WaitBound %v", got)
	}
	if err := r.Apply(context.Background(), []engine.CounterOp{{Key: "k", Hits: 1}}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	close(b.gate)
	// The router still works, and pooled state from the abandoned call is not reused.
	for i := 0; i < 3; i++ {
		ops := []engine.CounterOp{engine.Add("fresh", 1, time.Minute)}
		if err := r.Apply(context.Background(), ops, nil); err != nil || ops[0].After != uint64(i+1) {
			t.Fatalf("after a timeout, increment %d: %v, count %d", i+1, err, ops[0].After)
		}
	}
}

// TestDefaultCallTimeout: without a CallTimeout a call waits 1 s for a hung
// backend, then fails with a deadline error (and the engine is told so).
func TestDefaultCallTimeout(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer close(b.gate)
	if got := r.WaitBound(); got != time.Second {
		t.Fatalf("WaitBound %v, want the 1s default", got)
	}
	start := time.Now()
	err = r.Apply(context.Background(), []engine.CounterOp{{Key: "k", Hits: 1}}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	// Only the lower end is checked: a loaded machine answers later.
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("gave up after %v, before the 1s default", waited)
	}
}

// TestCoalesceByKeyAndKind: reads and increments of one key pile up behind a
// call in flight; the batch holds one read and one increment of the key
// (never merged with each other), every reader gets the one read's value,
// and the incrementers their counts in arrival order.
func TestCoalesceByKeyAndKind(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil), gate: make(chan struct{})}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	type result struct {
		name  string
		after uint64
	}
	results := make(chan result, 10)
	send := func(name string, op engine.CounterOp) {
		ops := []engine.CounterOp{op}
		if err := r.Apply(context.Background(), ops, nil); err != nil {
			t.Error(err)
		}
		results <- result{name, ops[0].After}
	}
	go send("first", engine.Add("k", 4, time.Minute))
	testenv.Eventually(t, "backend calls == 1", func() bool { return b.calls.Load() == 1 })
	queued := []struct {
		name string
		op   engine.CounterOp
	}{
		{"read1", engine.Get("k")},
		{"inc2", engine.Add("k", 2, time.Minute)},
		{"read2", engine.CounterOp{Key: "k", Kind: engine.OpGet, Hits: 100}}, // a read's hits count nowhere
		{"inc3", engine.Add("k", 3, time.Minute)},
		{"other", engine.Get("o")},
	}
	for i, q := range queued {
		go send(q.name, q.op)
		testenv.Eventually(t, "pending == i+1", func() bool { return r.Pending(0) == i+1 })
	}
	b.gate <- struct{}{}
	b.gate <- struct{}{}
	got := map[string]uint64{}
	for range 1 + len(queued) {
		res := <-results
		got[res.name] = res.after
	}
	// The read goes first in the batch (it arrived first), so it sees 4.
	want := map[string]uint64{"first": 4, "read1": 4, "read2": 4, "inc2": 6, "inc3": 9, "other": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.batches) != 2 {
		t.Fatalf("%d backend calls, want 2", len(b.batches))
	}
	second := b.batches[1]
	if len(second) != 3 ||
		second[0].Key != "k" || second[0].Kind != engine.OpGet ||
		second[1].Key != "k" || second[1].Kind != engine.OpAdd || second[1].Hits != 5 ||
		second[2].Key != "o" || second[2].Kind != engine.OpGet {
		t.Fatalf("second batch %+v: want read k, increment k by 5, read o", second)
	}
}

// TestSingleReadKeepsItsKind: a lone read (the one-item fast path) stays a read.
func TestSingleReadKeepsItsKind(t *testing.T) {
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return memory.New(nil) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inc := []engine.CounterOp{engine.Add("k", 2, time.Minute)}
	if err := r.Apply(context.Background(), inc, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		get := []engine.CounterOp{{Key: "k", Kind: engine.OpGet, Hits: 1, TTL: time.Minute}}
		if err := r.Apply(context.Background(), get, nil); err != nil || get[0].After != 2 {
			t.Fatalf("read: %v, After %d, want 2", err, get[0].After)
		}
	}
}

// TestManyOpRequestsExact: requests of several ops, on keys spread over the
// shards and repeated within a request, through pooled calls reused
// thousands of times: every op gets a count no other op of its key got,
// the counts of a key are exactly 1..total, and an op repeated in a request
// counts after the earlier one. Batches above and below the size where
// equal keys are found through a map rather than by comparison both run.
func TestManyOpRequestsExact(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opsPerReq int
		shards    int
		network   bool
	}{
		{"3 ops over 8 shards, memory", 3, 8, false},
		{"3 ops over 8 shards, network", 3, 8, true},
		{"24 ops on one shard, memory", 24, 1, false},
		{"24 ops on one shard, network", 24, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const keys, requests, callers = 6, 3000, 32
			shared := &slowBackend{mem: memory.New(nil)}
			r, err := actors.New(actors.Options{Shards: tc.shards, MaxInFlight: 2, Backend: func(int) engine.Backend {
				if tc.network {
					return shared
				}
				return memory.New(nil)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			seen := make([]sync.Map, keys)
			var wg sync.WaitGroup
			next := atomic.Int64{}
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ops := make([]engine.CounterOp, tc.opsPerReq)
					for n := next.Add(1); n <= requests; n = next.Add(1) {
						for j := range ops {
							// Op j names key (n+j)%keys: a request repeats keys
							// once it has more ops than there are keys.
							ops[j] = engine.CounterOp{Key: fmt.Sprintf("key-%d", (int(n)+j)%keys), Hits: 1, TTL: time.Minute}
						}
						if err := r.Apply(context.Background(), ops, nil); err != nil {
							t.Error(err)
							return
						}
						for j := range ops {
							k := (int(n) + j) % keys
							if _, dup := seen[k].LoadOrStore(ops[j].After, true); dup {
								t.Errorf("key %d: count %d handed out twice", k, ops[j].After)
							}
							if j >= keys && ops[j].After <= ops[j-keys].After {
								t.Errorf("key %d: op %d counted %d, not after the same request's op %d (%d)", k, j, ops[j].After, j-keys, ops[j-keys].After)
							}
						}
					}
				}()
			}
			wg.Wait()
			total := requests * tc.opsPerReq / keys
			for k := range keys {
				for c := 1; c <= total; c++ {
					if _, ok := seen[k].Load(uint64(c)); !ok {
						t.Fatalf("key %d: count %d of %d never handed out", k, c, total)
					}
				}
			}
		})
	}
}

// TestBackendGetsOnlyItsKind: what a backend receives, alone or coalesced,
// carries only what its kind uses (CounterOp.Validate) and no lease terms:
// those are the lease layer's, and an operation the lease layer passes on
// keeps them.
func TestBackendGetsOnlyItsKind(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	terms := engine.LeaseTerms{Kind: engine.LeaseWindow, Pair: 1, Limit: 10, UnitSec: 60, At: 1}
	leased := func(op engine.CounterOp) engine.CounterOp {
		op.Lease = terms
		return op
	}
	bucket := engine.Bucket{Now: 1, Interval: 1000, Burst: 5}
	calls := [][]engine.CounterOp{
		{leased(engine.Add("a", 1, time.Minute))},
		{leased(engine.BucketStep("t", 1, bucket))},
		{leased(engine.Add("a", 1, time.Minute)), leased(engine.Get("p")), leased(engine.BucketTake("t", 2, bucket)),
			engine.Reserve("r", 3, time.Minute), engine.Release("r", 1), leased(engine.Add("a", 2, time.Minute))},
	}
	for _, ops := range calls {
		if err := r.Apply(context.Background(), ops, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, batch := range b.batches {
		for _, op := range batch {
			n++
			if err := op.Validate(); err != nil {
				t.Error(err)
			}
			if op.Lease != (engine.LeaseTerms{}) {
				t.Errorf("%v %q reached the backend with lease terms %+v", op.Kind, op.Key, op.Lease)
			}
		}
	}
	if n == 0 {
		t.Fatal("the backend got no operations")
	}
}
