package backendtest

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Board is what the quota service's replicas exchange their claims
// through (quota.Board), as each backend implements it.
type Board interface {
	Exchange(ctx context.Context, replica string, posts []engine.ClaimPost) ([][]engine.ClaimEntry, error)
}

// BoardExchange checks a backend's board: each replica's entry under a
// key is kept (the latest one), every replica reads every entry of the
// keys it posts to, keys are apart, and many replicas posting at once lose
// nothing (memcache's compare-and-swap, Redis' hash).
func BoardExchange(t *testing.T, b Board, prefix string) {
	ctx := context.Background()
	at := time.Now().Truncate(time.Millisecond)
	post := func(replica string, posts ...engine.ClaimPost) [][]engine.ClaimEntry {
		t.Helper()
		got, err := b.Exchange(ctx, replica, posts)
		if err != nil {
			t.Fatalf("%s: Exchange: %v", replica, err)
		}
		if len(got) != len(posts) {
			t.Fatalf("%s: %d answers for %d posts", replica, len(got), len(posts))
		}
		return got
	}
	k1, k2 := prefix+"board-a", prefix+"board-b"
	p := func(key, v string, at time.Time) engine.ClaimPost {
		return engine.ClaimPost{Key: key, Value: []byte(v), At: at, TTL: time.Minute}
	}
	post("r1", p(k1, "one", at), p(k2, "uno", at))
	got := post("r2", p(k1, "two", at))
	want := map[string]string{"r1": "one", "r2": "two"}
	if m := entries(got[0]); !maps.Equal(m, want) {
		t.Errorf("%s after r1 and r2 posted: %v, want %v", k1, m, want)
	}
	// r1 posts again: its latest entry replaces its first; k2 is apart.
	got = post("r1", p(k1, "one'", at.Add(time.Second)), p(k2, "uno'", at.Add(time.Second)))
	if m := entries(got[0]); !maps.Equal(m, map[string]string{"r1": "one'", "r2": "two"}) {
		t.Errorf("%s after r1 posted again: %v", k1, m)
	}
	if m := entries(got[1]); !maps.Equal(m, map[string]string{"r1": "uno'"}) {
		t.Errorf("%s: %v, want only r1's", k2, m)
	}
	for _, e := range got[0] {
		if e.Replica == "r1" && !e.At.Equal(at.Add(time.Second)) {
			t.Errorf("r1's entry At %v, want %v", e.At, at.Add(time.Second))
		}
	}
	// Twenty replicas at once, each twice: every one's last entry is there.
	k3 := prefix + "board-c"
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := string(rune('A' + i))
			for n := range 2 {
				if _, err := b.Exchange(ctx, r, []engine.ClaimPost{p(k3, r+string(rune('0'+n)), at)}); err != nil {
					t.Errorf("%s: %v", r, err)
				}
			}
		}()
	}
	wg.Wait()
	m := entries(post("Z", p(k3, "z", at))[0])
	for i := range 20 {
		r := string(rune('A' + i))
		if m[r] != r+"1" {
			t.Errorf("%s under %s after concurrent posts: %q, want %q (%d entries)", r, k3, m[r], r+"1", len(m))
		}
	}
}

func entries(es []engine.ClaimEntry) map[string]string {
	m := map[string]string{}
	for _, e := range es {
		m[e.Replica] = string(e.Value)
	}
	return m
}
