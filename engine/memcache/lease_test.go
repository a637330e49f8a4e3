package memcache

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/internal/backendtest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestLeaseOps: reservations and releases are memcached's own atomic incr
// and decr (add on a miss), so their answers are true values, unlike the
// reference's increments (read now, incr later); token takes are
// compare-and-swap steps that agree with engine.TokenBucketTake.
func TestLeaseOps(t *testing.T) {
	m := testenv.StartMemcached(t)
	if m == nil {
		return
	}
	peek := func(t testing.TB, key string) (int64, time.Duration, bool) {
		t.Helper()
		v, ttl, ok := metaTTL(t.(*testing.T), m.Addr, key)
		if !ok {
			return 0, 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s holds %q, not a counter", key, v)
		}
		return n, time.Duration(ttl) * time.Second, true
	}
	s := backendtest.Store{Backend: newBackend(t, options(m.Addr)), Peek: peek, TTLSlack: 2 * time.Second}
	t.Run("reserve and release", func(t *testing.T) { backendtest.ReserveRelease(t, s) })
	t.Run("token take", func(t *testing.T) { backendtest.TokenTake(t, s) })
	t.Run("claims board", func(t *testing.T) { backendtest.BoardExchange(t, s.Backend.(backendtest.Board), "") })
}
