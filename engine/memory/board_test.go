package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestBoardForgetsExpiredKeys: an exchange no longer walks every key, so
// the expired ones must still go, fast enough that they stay a bounded
// share of the live ones while new keys keep coming, and an expired key
// met before the sweep found it must read as empty.
func TestBoardForgetsExpiredKeys(t *testing.T) {
	now := time.Unix(1795313464, 0)
	b := NewBoard(func() time.Time { return now })
	ctx := context.Background()
	post := func(replica string, keys ...string) [][]engine.ClaimEntry {
		t.Helper()
		posts := make([]engine.ClaimPost, len(keys))
		for i, k := range keys {
			posts[i] = engine.ClaimPost{Key: k, TTL: time.Minute, At: now, Value: []byte(replica)}
		}
		out, err := b.Exchange(ctx, replica, posts)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	batch := func(round, n int) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d_k%d", round, i)
		}
		return keys
	}

	// 20,000 keys, then they all expire.
	for r := range 200 {
		post("a", batch(r, 100)...)
	}
	if n := b.keys(); n != 20000 {
		t.Fatalf("%d keys after 20,000 posts", n)
	}
	now = now.Add(2 * time.Minute)

	// A key met before the sweep found it: its old entries are too old
	// to count.
	if got := post("b", "r0_k0"); len(got[0]) != 1 || got[0][0].Replica != "b" {
		t.Fatalf("an expired key read %v, want only b's new entry", got[0])
	}

	// New keys keep coming, 100 an exchange, each living a minute: the
	// board holds the live ones and a bounded share more.
	live := 0
	for r := 200; r < 1400; r++ {
		post("a", batch(r, 100)...)
		now = now.Add(100 * time.Millisecond) // 600 exchanges a minute
		live = min(live+100, 600*100)
		if r < 220 {
			continue
		}
		if n := b.keys(); n > live+live/2+sweepSample {
			t.Fatalf("exchange %d: %d keys held, %d live", r, n, live)
		}
	}
}
