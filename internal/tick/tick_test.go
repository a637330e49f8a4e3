package tick_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/tick"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryRunsUntilStopped: fn runs repeatedly, and Every returns once
// stop is closed.
func TestEveryRunsUntilStopped(t *testing.T) {
	stop := make(chan struct{})
	calls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Every(stop, time.Millisecond, func() {
			select {
			case calls <- struct{}{}:
			default:
			}
		})
	}()
	for i := 0; i < 3; i++ {
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d did not come", i+1)
		}
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after stop")
	}
}

// TestEveryStopsBeforeTheFirstTick: a stop before the first tick means no call.
func TestEveryStopsBeforeTheFirstTick(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	tick.Every(stop, time.Hour, func() { t.Error("fn ran after stop") })
}
