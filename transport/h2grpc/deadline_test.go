package h2grpc

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestExpiredDeadline: a call whose deadline has passed by the time a
// worker takes it is answered DEADLINE_EXCEEDED, and its method does not
// run (a rate limit call would count its hits).
func TestExpiredDeadline(t *testing.T) {
	var ran atomic.Int64
	count := func(_ context.Context, req, out []byte) ([]byte, error) {
		ran.Add(1)
		return append(out, req...), nil
	}
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Count": count}})
	r := dialRaw(t, addr)
	for i, timeout := range []string{"1n", "0m", "100u"} {
		id := uint32(2*i + 1)
		r.headers(id, "/t.S/Count", false, "grpc-timeout", timeout)
		if timeout == "100u" {
			// Once the server has read the headers (the PING comes
			// after them), 100 µs are sure to pass before the message.
			r.pingRoundTrip([8]byte{byte(id)})
			time.Sleep(time.Millisecond)
		}
		r.message(id, []byte("x"))
		_, got := answers(t, r, id)
		if got[id] != strconv.Itoa(int(codes.DeadlineExceeded)) {
			t.Errorf("grpc-timeout %s: grpc-status %s, want DEADLINE_EXCEEDED", timeout, got[id])
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the method ran %d times for calls already past their deadline", n)
	}
	r.headers(7, "/t.S/Count", false, "grpc-timeout", "1M")
	r.message(7, []byte("x"))
	if _, got := answers(t, r, 7); got[7] != "0" || ran.Load() != 1 {
		t.Errorf("a call with time left: grpc-status %s, ran %d", got[7], ran.Load())
	}
}

// TestBatchDeadlines: each call of a batch keeps its own deadline. One
// past its deadline when the batch starts is not in it; one whose
// deadline passes while the batch runs is answered DEADLINE_EXCEEDED then;
// the others get their answers when it returns.
func TestBatchDeadlines(t *testing.T) {
	entered := make(chan []byte, 1)
	release := make(chan struct{})
	var released sync.Once
	releaseBatch := func() { released.Do(func() { close(release) }) }
	var batchDeadline atomic.Value
	_, addr := serve(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": serveBatch(func(ctx context.Context, calls []Call) {
			var ins []byte
			for i := range calls {
				ins = append(ins, calls[i].In...)
				calls[i].Out = append(calls[i].Out, calls[i].In...)
			}
			_, has := ctx.Deadline()
			batchDeadline.Store(has)
			entered <- ins
			<-release
		})},
	})
	t.Cleanup(releaseBatch) // before the server stops, should the test fail
	r := dialSettled(t, addr)
	writeTogether(t, r, func() {
		r.headers(1, "/t.S/Echo", false, "grpc-timeout", "1n") // past already
		r.message(1, []byte{1})
		r.headers(3, "/t.S/Echo", false) // no deadline
		r.message(3, []byte{3})
		r.headers(5, "/t.S/Echo", false, "grpc-timeout", "300m") // passes while the batch runs
		r.message(5, []byte{5})
		r.headers(7, "/t.S/Echo", false, "grpc-timeout", "1H")
		r.message(7, []byte{7})
	})
	ins := <-entered
	if bytes.IndexByte(ins, 1) >= 0 {
		t.Errorf("the batch got the call past its deadline: %v", ins)
	}
	if len(ins) != 3 {
		// Possible on a machine so busy that 300 ms passed before the
		// batch started: then the call was not run at all, also right.
		t.Logf("the batch got calls %v: the timer's part is not exercised", ins)
	}
	if has, _ := batchDeadline.Load().(bool); has {
		t.Error("the batch ran with a deadline though one of its calls has none")
	}
	// Streams 1 and 5 are answered while the batch method still runs.
	_, early := answers(t, r, 1, 5)
	for _, id := range []uint32{1, 5} {
		if early[id] != strconv.Itoa(int(codes.DeadlineExceeded)) {
			t.Errorf("stream %d: grpc-status %s, want DEADLINE_EXCEEDED", id, early[id])
		}
	}
	releaseBatch()
	msgs, late := answers(t, r, 3, 7)
	for _, id := range []uint32{3, 7} {
		if late[id] != "0" || len(msgs[id]) != 1 || msgs[id][0] != byte(id) {
			t.Errorf("stream %d: %v status %s, want its echo", id, msgs[id], late[id])
		}
	}
	// Nothing more is written on the streams answered early.
	for _, f := range r.pingRoundTrip([8]byte{9}) {
		if f.Header().StreamID == 1 || f.Header().StreamID == 5 {
			t.Errorf("frame on a stream answered before: %v", f)
		}
		if _, ok := f.(*http2.RSTStreamFrame); ok {
			t.Errorf("RST_STREAM after complete answers: %v", f)
		}
	}
}

// TestBatchServedWhenEveryCallExpired: a batch whose calls are all past
// their deadlines is still served, with no calls, so that what its batch
// method got ready is released.
func TestBatchServedWhenEveryCallExpired(t *testing.T) {
	served := make(chan int, 1)
	_, addr := serve(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": serveBatch(func(_ context.Context, calls []Call) {
			served <- len(calls)
		})},
	})
	r := dialSettled(t, addr)
	writeTogether(t, r, func() {
		for _, id := range []uint32{1, 3} {
			r.headers(id, "/t.S/Echo", false, "grpc-timeout", "1n")
			r.message(id, []byte{byte(id)})
		}
	})
	_, codes := answers(t, r, 1, 3)
	if codes[1] != "4" || codes[3] != "4" {
		t.Errorf("statuses %v, want DEADLINE_EXCEEDED (4) for both", codes)
	}
	select {
	case n := <-served:
		if n != 0 {
			t.Errorf("served %d calls, want none", n)
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("the batch was never served")
	}
}
