package memory

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Board is a claims board in memory (engine.ClaimPost): for the quota
// service's replicas that share one memory backend, in one process.
type Board struct {
	clock func() time.Time

	mu sync.Mutex
	m  map[string]*boardKey
}

// sweepSample is how many keys an exchange looks at, at least, for
// expired ones to delete. Every quota shard exchanges about once a
// second, and a million buckets make a million keys: walking them all
// on every call under the one lock was a quarter of the server's CPU
// under a bucket flood. Looking at a fixed multiple of the keys an
// exchange writes (more while most of what it meets has expired, as
// Redis's active expiry does) keeps the expired keys a bounded share
// of the live ones: a key expires no faster than keys are written, and
// each exchange looks at sweepPerPost times as many as it writes.
const (
	sweepSample  = 64
	sweepPerPost = 4
)

type boardKey struct {
	expires time.Time
	entries map[string]engine.ClaimEntry
}

// NewBoard is an empty board; clock may be nil for time.Now.
func NewBoard(clock func() time.Time) *Board {
	if clock == nil {
		clock = time.Now
	}
	return &Board{clock: clock, m: map[string]*boardKey{}}
}

// Exchange writes each post and returns, per post, every replica's entry
// under its key.
func (b *Board) Exchange(_ context.Context, replica string, posts []engine.ClaimPost) ([][]engine.ClaimEntry, error) {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now, sweepSample+sweepPerPost*len(posts))
	out := make([][]engine.ClaimEntry, len(posts))
	for i, p := range posts {
		k := b.m[p.Key]
		if k == nil {
			k = &boardKey{entries: map[string]engine.ClaimEntry{}}
			b.m[p.Key] = k
		}
		k.entries[replica] = engine.ClaimEntry{Replica: replica, Value: append([]byte(nil), p.Value...), At: p.At}
		k.expires = now.Add(p.TTL)
		for r, e := range k.entries {
			if p.At.Sub(e.At) > p.TTL {
				delete(k.entries, r)
				continue
			}
			out[i] = append(out[i], e)
		}
		// By replica, not in map order: a reader sums the claims as
		// floats, and the same board should give the same sums (the
		// quota simulator replays a seed to the same fleet).
		slices.SortFunc(out[i], func(a, b engine.ClaimEntry) int { return strings.Compare(a.Replica, b.Replica) })
	}
	return out, nil
}

// sweep deletes expired keys among about budget of them, starting where
// a map's range starts (at random), and goes on while a quarter or more
// of what it met had expired.
func (b *Board) sweep(now time.Time, budget int) {
	for range 16 {
		seen, expired := 0, 0
		for k, v := range b.m {
			if seen == budget {
				break
			}
			seen++
			if !now.Before(v.expires) {
				delete(b.m, k)
				expired++
			}
		}
		if seen < budget || expired*4 < seen {
			return
		}
	}
}

// keys is how many keys the board holds, expired ones not yet swept
// among them.
func (b *Board) keys() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}
