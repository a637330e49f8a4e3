package backendtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Store is what a check needs to know about a backend beyond Exec.
type Store struct {
	Backend engine.Backend
	// Peek reads key's stored value and time to live from the store itself
	// (not through Backend), without changing them; ok is false when the
	// key does not exist.
	Peek func(t testing.TB, key string) (value int64, ttl time.Duration, ok bool)
	// TTLSlack is how far a TTL read may fall below the one set: the time
	// the checks take plus the store's resolution (whole seconds for
	// memcached).
	TTLSlack time.Duration
	// RefreshOnAdd: an add to an existing counter sets its TTL again (Redis
	// EXPIRE, memory); memcached's incr keeps the TTL the counter was created
	// with, as the reference's memcache counters do.
	RefreshOnAdd bool
	// Prefix keeps the keys of one run apart from another's on a shared store.
	Prefix string
}

func (s Store) exec(t testing.TB, ops ...engine.CounterOp) []engine.CounterOp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Backend.Exec(ctx, ops); err != nil {
		t.Fatalf("Exec %v: %v", kinds(ops), err)
	}
	return ops
}

func kinds(ops []engine.CounterOp) []string {
	var out []string
	for _, op := range ops {
		out = append(out, fmt.Sprintf("%d:%s+%d", op.Kind, op.Key, op.Hits))
	}
	return out
}

// checkTTL fails unless ttl is want, less at most TTLSlack.
func (s Store) checkTTL(t testing.TB, what string, ttl, want time.Duration) {
	t.Helper()
	// Stores that keep whole seconds round a TTL up, never down.
	if ttl > (want+time.Second-1).Truncate(time.Second) || ttl < want-s.TTLSlack {
		t.Fatalf("%s: TTL %v, want %v (less at most %v)", what, ttl, want, s.TTLSlack)
	}
}

// ReserveRelease runs the window operations of a lease through a table:
// each step is one Exec on one key, and its answer, the stored value and
// the TTL are checked after it.
func ReserveRelease(t *testing.T, s Store) {
	k := s.Prefix + "rr"
	missing := s.Prefix + "rr-missing"
	reserve := engine.Reserve
	release := engine.Release
	secondTTL := 200 * time.Second
	if !s.RefreshOnAdd {
		secondTTL = 100 * time.Second // memcached keeps the TTL of the add that created the key
	}
	steps := []struct {
		name   string
		op     engine.CounterOp
		after  uint64
		stored int64         // -1: the key must not exist
		ttl    time.Duration // the TTL the key must have (less the slack)
	}{
		{"reserve creates the counter with the TTL", reserve(k, 5, 100*time.Second), 5, 5, 100 * time.Second},
		{"reserve answers the value after it", reserve(k, 3, 200*time.Second), 8, 8, secondTTL},
		{"release takes back and keeps the TTL", release(k, 2), 6, 6, secondTTL},
		{"release stops at 0 and keeps the key", release(k, 100), 0, 0, secondTTL},
		{"release of nothing at 0", release(k, 1), 0, 0, secondTTL},
		{"reserve after a release to 0", reserve(k, 4, 200*time.Second), 4, 4, 200 * time.Second},
		{"release of a missing counter creates nothing", release(missing, 3), 0, -1, 0},
	}
	if !s.RefreshOnAdd {
		steps[5].ttl = secondTTL
	}
	for _, st := range steps {
		got := s.exec(t, st.op)[0]
		if got.After != st.after {
			t.Fatalf("%s: After = %d, want %d", st.name, got.After, st.after)
		}
		v, ttl, ok := s.Peek(t, st.op.Key)
		if st.stored < 0 {
			if ok {
				t.Fatalf("%s: the key exists (value %d, TTL %v)", st.name, v, ttl)
			}
			continue
		}
		if !ok || v != st.stored {
			t.Fatalf("%s: stored %d (exists %v), want %d", st.name, v, ok, st.stored)
		}
		s.checkTTL(t, st.name, ttl, st.ttl)
	}

	// One call holding reservations and releases of several keys answers
	// each in call order, as the shards send them.
	a, b := s.Prefix+"rr-a", s.Prefix+"rr-b"
	got := s.exec(t, reserve(a, 10, time.Minute), reserve(b, 7, time.Minute), release(k, 1), release(a, 4))
	if w := []uint64{10, 7, 3, 6}; !slices.Equal(afters(got), w) {
		t.Fatalf("mixed call: answers %v, want %v", afters(got), w)
	}

	reserveConcurrently(t, s)
}

// reserveConcurrently: concurrent reservations on one key each get their
// own true value: together, every count from 1 to the total exactly once.
func reserveConcurrently(t *testing.T, s Store) {
	reserve := engine.Reserve
	const workers, each = 8, 25
	c := s.Prefix + "rr-concurrent"
	var mu sync.Mutex
	var seen []uint64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				op := []engine.CounterOp{reserve(c, 1, time.Minute)}
				err := s.Backend.Exec(ctx, op)
				cancel()
				if err != nil {
					t.Errorf("concurrent reserve: %v", err)
					return
				}
				mu.Lock()
				seen = append(seen, op[0].After)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(seen)
	for i, v := range seen {
		if v != uint64(i+1) {
			t.Fatalf("concurrent reservations of 1 answered %v…: count %d is missing or repeated", seen[:min(len(seen), i+3)], i+1)
		}
	}
	if v, _, _ := s.Peek(t, c); v != workers*each {
		t.Fatalf("concurrent reservations stored %d, want %d", v, workers*each)
	}
}

func afters(ops []engine.CounterOp) []uint64 {
	out := make([]uint64, len(ops))
	for i := range ops {
		out[i] = ops[i].After
	}
	return out
}

// TokenTake checks OpTokenTake against engine.TokenBucketTake, the model:
// a table of steps on one bucket, then a seeded random walk, each step's
// answer (the TAT found), the stored TAT and its TTL.
func TokenTake(t *testing.T, s Store) {
	const n0 = int64(1_795_313_464_000_000) // µs; any fixed time works, the TAT is all the state
	take := func(key string, hits uint64, now, interval, burst int64) engine.CounterOp {
		return engine.BucketTake(key, hits, engine.Bucket{Now: now, Interval: interval, Burst: burst})
	}
	k := s.Prefix + "take"
	steps := []struct {
		name  string
		op    engine.CounterOp
		found int64
		tat   int64 // stored after
	}{
		{"a missing bucket is full", take(k, 3, n0, 1000, 5), 0, n0 + 3000},
		{"takes what is left", take(k, 5, n0, 1000, 5), n0 + 3000, n0 + 5000},
		{"an empty bucket takes nothing", take(k, 1, n0, 1000, 5), n0 + 5000, n0 + 5000},
		{"a token and a half refilled: one", take(k, 2, n0+1500, 1000, 5), n0 + 5000, n0 + 6000},
		{"refilled past full: burst", take(k, 10, n0+100_000, 1000, 5), n0 + 6000, n0 + 105_000},
		{"zero hits change nothing", take(k, 0, n0+200_000, 1000, 5), n0 + 105_000, n0 + 105_000},
		{"no interval changes nothing", take(k, 2, n0+200_000, 0, 5), n0 + 105_000, n0 + 105_000},
		{"no burst changes nothing", take(k, 2, n0+200_000, 1000, 0), n0 + 105_000, n0 + 105_000},
		{"exactly one", take(k, 1, n0+200_000, 1000, 5), n0 + 105_000, n0 + 201_000},
	}
	setAt := int64(0) // the clock of the step that last stored a TAT: it set the TTL
	for _, st := range steps {
		model := st.op
		wantNext, took := engine.TokenBucketTake(st.found, &model)
		if took == 0 {
			wantNext = st.found // took nothing: nothing changes
		}
		if wantNext != st.tat {
			t.Fatalf("%s: the table disagrees with engine.TokenBucketTake (%d, table %d)", st.name, wantNext, st.tat)
		}
		got := s.exec(t, st.op)[0]
		if int64(got.After) != st.found {
			t.Fatalf("%s: found TAT %d, want %d", st.name, got.After, st.found)
		}
		if st.tat != st.found {
			setAt = st.op.Bucket.Now
		}
		checkTAT(t, s, st.name, k, st.tat, setAt)
	}

	// A random walk: clocks that move forward by less and more than a
	// token, takes smaller and larger than the burst, on two buckets in
	// one call (as a shard sends them), against the model.
	r := rand.New(rand.NewPCG(29, 1))
	keys := []string{s.Prefix + "walk-a", s.Prefix + "walk-b"}
	tats, setAt2 := []int64{0, 0}, []int64{0, 0}
	now := n0
	for i := range 60 {
		now += r.Int64N(4000)
		ops := make([]engine.CounterOp, len(keys))
		for j, key := range keys {
			ops[j] = take(key, uint64(r.IntN(12)), now, 500+int64(j)*250, 8)
		}
		model := slices.Clone(ops)
		s.exec(t, ops...)
		for j := range ops {
			if int64(ops[j].After) != tats[j] {
				t.Fatalf("walk step %d %s: found %d, the model holds %d", i, keys[j], ops[j].After, tats[j])
			}
			if next, took := engine.TokenBucketTake(tats[j], &model[j]); took > 0 {
				tats[j], setAt2[j] = next, now
			}
			if tats[j] != 0 {
				checkTAT(t, s, fmt.Sprintf("walk step %d", i), keys[j], tats[j], setAt2[j])
			}
		}
	}
}

func checkTAT(t testing.TB, s Store, what, key string, tat, now int64) {
	t.Helper()
	v, ttl, ok := s.Peek(t, key)
	if !ok || v != tat {
		t.Fatalf("%s: stored TAT %d (exists %v), want %d", what, v, ok, tat)
	}
	s.checkTTL(t, what, ttl, engine.TokenBucketTTL(tat, now))
}
