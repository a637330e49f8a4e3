package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/internal/backendtest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// leaseStore is b with a Peek through c, an independent client.
func leaseStore(b *Backend, c goredis.Cmdable) backendtest.Store {
	peek := func(t testing.TB, key string) (int64, time.Duration, bool) {
		t.Helper()
		ctx := testCtx(t)
		v, err := c.Get(ctx, key).Int64()
		if errors.Is(err, goredis.Nil) {
			return 0, 0, false
		}
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", key, err)
		}
		return v, ttl, true
	}
	return backendtest.Store{Backend: b, Peek: peek, TTLSlack: 2 * time.Second, RefreshOnAdd: true}
}

func clusterBackend(t *testing.T, c *testenv.RedisCluster) *Backend {
	o := DefaultOptions()
	o.Type, o.SocketType, o.URL = "CLUSTER", "tcp", strings.Join(c.Addrs, ",")
	return newBackend(t, o)
}

func TestLeaseOps(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	s := leaseStore(newBackend(t, singleOptions(r)), r.Client(t))
	t.Run("reserve and release", func(t *testing.T) { backendtest.ReserveRelease(t, s) })
	t.Run("token take", func(t *testing.T) { backendtest.TokenTake(t, s) })
	t.Run("claims board", func(t *testing.T) { backendtest.BoardExchange(t, s.Backend.(backendtest.Board), "") })
}

func TestLeaseOpsCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	s := leaseStore(clusterBackend(t, c), c.Client(t))
	t.Run("reserve and release", func(t *testing.T) { backendtest.ReserveRelease(t, s) })
	t.Run("token take", func(t *testing.T) { backendtest.TokenTake(t, s) })
	t.Run("claims board", func(t *testing.T) { backendtest.BoardExchange(t, s.Backend.(backendtest.Board), "") })
}

// TestLeaseScriptsRerun: a server that lost its scripts (restart, failover,
// SCRIPT FLUSH) answers NOSCRIPT; the token take and the release run again
// once, with their text, and count once, beside a reservation in the same
// call.
func TestLeaseScriptsRerun(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			var b *Backend
			var flush func() error
			var check goredis.Cmdable
			if mode == "single" {
				r := testenv.StartRedis(t, testenv.RedisOptions{})
				b = newBackend(t, singleOptions(r))
				c := r.Client(t)
				check, flush = c, func() error { return c.ScriptFlush(ctx).Err() }
			} else {
				cl := testenv.StartRedisCluster(t, 3)
				b = clusterBackend(t, cl)
				c := cl.Client(t)
				check = c
				flush = func() error {
					return c.ForEachShard(ctx, func(ctx context.Context, n *goredis.Client) error { return n.ScriptFlush(ctx).Err() })
				}
			}
			now := int64(1_795_313_464_000_000)
			batch := func() []engine.CounterOp {
				return []engine.CounterOp{
					engine.BucketTake("take", 2, engine.Bucket{Now: now, Interval: 1000, Burst: 10}),
					engine.Release("counter", 3),
					engine.Reserve("counter{2}", 4, time.Minute),
				}
			}
			if err := b.Exec(ctx, []engine.CounterOp{engine.Reserve("counter", 10, time.Minute)}); err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				if err := flush(); err != nil {
					t.Fatal(err)
				}
				ops := batch()
				if err := b.Exec(ctx, ops); err != nil {
					t.Fatalf("round %d after SCRIPT FLUSH: %v", round, err)
				}
				wantTake := uint64(0)
				if round == 1 {
					wantTake = uint64(now + 2000)
				}
				if ops[0].After != wantTake || ops[1].After != uint64(7-3*round) || ops[2].After != uint64(4+4*round) {
					t.Fatalf("round %d: answers take %d release %d reserve %d", round, ops[0].After, ops[1].After, ops[2].After)
				}
				if v, err := check.Get(ctx, "take").Int64(); err != nil || v != now+2000*int64(round+1) {
					t.Fatalf("round %d: stored TAT %d, %v; want %d (the take ran once)", round, v, err, now+2000*int64(round+1))
				}
				if v, err := check.Get(ctx, "counter").Int64(); err != nil || v != int64(7-3*round) {
					t.Fatalf("round %d: counter %d, %v; want %d (the release ran once)", round, v, err, 7-3*round)
				}
			}
		})
	}
}
