package memory

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/internal/backendtest"
)

func leaseStore(t *testing.T) backendtest.Store {
	now := time.Unix(1795313464, 0)
	b := New(func() time.Time { return now })
	t.Cleanup(func() { _ = b.Close() })
	peek := func(_ testing.TB, key string) (int64, time.Duration, bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		e := b.m[key]
		if e == nil || e.expires <= now.UnixNano() {
			return 0, 0, false
		}
		return int64(e.n), time.Duration(e.expires - now.UnixNano()), true
	}
	return backendtest.Store{Backend: b, Peek: peek, RefreshOnAdd: true}
}

func TestLeaseReserveRelease(t *testing.T) { backendtest.ReserveRelease(t, leaseStore(t)) }

func TestBoardExchange(t *testing.T)  { backendtest.BoardExchange(t, NewBoard(time.Now), "") }
func TestLeaseTokenTake(t *testing.T) { backendtest.TokenTake(t, leaseStore(t)) }
