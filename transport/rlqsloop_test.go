package transport

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv/memengine"
	"github.com/sluicehq/sluice/quota"
)

// stallingCounter holds every call with an operation on a key holding
// stall until release is closed, as a store that stopped answering: the
// call's own deadline does not end it.
type stallingCounter struct {
	engine.Counter
	stall   string
	release chan struct{}
	held    atomic.Int64
}

func (c *stallingCounter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	for _, op := range ops {
		if strings.Contains(op.Key, c.stall) {
			c.held.Add(1)
			<-c.release
			break
		}
	}
	return c.Counter.Apply(ctx, ops, batch)
}

// loopServer is a quota server on a one-shard quota service whose store
// stalls calls on the buckets named "later…" until counter.release is
// closed (the caller closes it before the test ends).
func loopServer(t *testing.T) (*stallingCounter, *quotaServer) {
	t.Helper()
	e := memengine.New(t, memengine.Rules1000, memory.Options{})
	counter := &stallingCounter{Counter: e.Counter, stall: "later", release: make(chan struct{})}
	o := quota.DefaultOptions()
	o.Shards = 1
	svc, err := quota.New(o, e.Service, counter, nil, e.Stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return counter, newQuotaServer(svc, slog.New(slog.DiscardHandler))
}

// TestQuotaAnswersWhileAReportIsHandedOver: a stream's answers are written
// while its own large report still waits for room in a shard. An Envoy
// whose stream was cut reports its 4,000 buckets on the new one, with one
// it has just made (time_elapsed 0, on its no_assignment_behavior until
// answered). The shard answers the young bucket from its first store call
// and then stalls on the next (the store is slow), so the rest of the
// report waits in the stream's lane. The young bucket's answer must reach
// the Envoy meanwhile; the stream's loop used to be the goroutine handing
// the report over, and wrote nothing until it had.
func TestQuotaAnswersWhileAReportIsHandedOver(t *testing.T) {
	counter, q := loopServer(t)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(counter.release) }) }
	defer release()

	// The shard takes a report four chunks (64 usages each) a batch, and
	// stops taking while a store call is out and hundreds of operations
	// wait for the next; the store stalls from the second batch on, so
	// most of the report still waits for room in the stream's lane.
	usages := make([]quota.Usage, 0, 4001)
	for i := range 4000 {
		name := fmt.Sprint("first", i)
		if i >= 300 {
			name = fmt.Sprint("later", i)
		}
		usages = append(usages, quota.Usage{Bucket: alloc.BucketOf(map[string]string{"user": name}), Elapsed: 5 * time.Second, Allowed: 10})
	}
	young := alloc.BucketOf(map[string]string{"user": "young"})
	usages = append(usages, quota.Usage{Bucket: young, Allowed: 1})

	ctx, cancel := context.WithCancel(context.Background())
	over := make(chan struct{}) // the call is over: recv fails
	sent := false
	recv := func() (report, error) {
		if !sent {
			sent = true
			return report{domain: "q", usages: usages}, nil
		}
		<-over
		return report{}, io.EOF
	}
	answered := make(chan struct{})
	var answeredOnce sync.Once
	send := func(acts []quota.Action) error {
		for _, a := range acts {
			if a.Bucket == young {
				answeredOnce.Do(func() { close(answered) })
			}
		}
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- q.serve(ctx, recv, send)
		close(over)
	}()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Errorf("the young bucket was not answered in 10 s while the rest of its report waited for the shard (%d store calls held)", counter.held.Load())
	}
	release()
	cancel()
	if err := <-done; err == nil {
		t.Error("serve returned nil after its context was cancelled")
	}
}

// TestQuotaUnreadAnswersHoldReportsBack: an Envoy that never reads its
// answers gets no more of its reports taken once the answers waiting for
// it fill the outbox, as its HTTP/2 window holds back what the server
// would write (a receiver that only handed reports over took all of them:
// 1,594 reports of 1,000 new buckets in 15 s, 1.3 GB).
func TestQuotaUnreadAnswersHoldReportsBack(t *testing.T) {
	counter, q := loopServer(t)
	close(counter.release) // no stall here
	ctx, cancel := context.WithCancel(context.Background())
	over := make(chan struct{})
	var taken atomic.Int64
	recv := func() (report, error) {
		select {
		case <-over:
			return report{}, io.EOF
		default:
		}
		n := taken.Add(1)
		us := make([]quota.Usage, 1000)
		for i := range us {
			us[i] = quota.Usage{Bucket: alloc.BucketOf(map[string]string{"user": fmt.Sprint("r", n, "-", i)})}
		}
		return report{domain: "q", usages: us}, nil
	}
	unblock := make(chan struct{})
	send := func([]quota.Action) error { // the Envoy never reads
		<-unblock
		return io.ErrClosedPipe
	}
	done := make(chan error, 1)
	go func() {
		done <- q.serve(ctx, recv, send)
		close(over)
	}()
	// Each report subscribes 1,000 buckets, all answered: the outbox's
	// room (outboxRoom actions) is full after two, whatever the pace.
	const most = 20
	deadline := time.Now().Add(3 * time.Second)
	for taken.Load() <= most && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := taken.Load(); n > most {
		t.Errorf("%d reports taken from an Envoy that reads nothing, want at most %d", n, most)
	} else {
		t.Logf("%d reports taken from an Envoy that reads nothing", n)
	}
	cancel()
	close(unblock)
	<-done
}
