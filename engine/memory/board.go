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
	for k, v := range b.m {
		if !now.Before(v.expires) {
			delete(b.m, k)
		}
	}
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
