package h2grpc

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// writeTogether writes the frames that build makes in one write, so that
// the server reads them in one go.
func writeTogether(t *testing.T, r *raw, build func()) {
	t.Helper()
	var buf bytes.Buffer
	saved := r.fr
	r.fr = http2.NewFramer(&buf, nil)
	build()
	r.fr = saved
	if _, err := r.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// answers reads until every stream of ids has ended, and returns each one's
// message (without its prefix) and grpc-status.
func answers(t *testing.T, r *raw, ids ...uint32) (map[uint32][]byte, map[uint32]string) {
	t.Helper()
	msgs, codes := map[uint32][]byte{}, map[uint32]string{}
	for len(codes) < len(ids) {
		switch f := r.next(func(http2.Frame) bool { return true }).(type) {
		case *http2.DataFrame:
			msgs[f.StreamID] = append(msgs[f.StreamID], f.Data()...)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				codes[f.StreamID] = field(f, "grpc-status")
			}
		}
	}
	for id, m := range msgs {
		if len(m) >= 5 {
			msgs[id] = m[5:]
		}
	}
	return msgs, codes
}

// TestBatchReadTogether: calls of a batch method read together run as one
// batch, in the order read, on what the batch method returned when the
// batch was dispatched and with the latest of their deadlines; each gets
// its own answer or status, all in one write.
// A call of another method read with them runs on its own.
func TestBatchReadTogether(t *testing.T) {
	type run struct {
		ins      [][]byte
		opened   int // the batch method's count when it returned this serve
		deadline time.Duration
	}
	runs := make(chan run, 4)
	release := make(chan struct{})
	var openedMu sync.Mutex
	opened := 0
	var mu sync.Mutex
	var writes [][]byte
	_, addr := serveOn(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo, "/t.S/Other": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": func() BatchServe {
			openedMu.Lock()
			opened++
			n := opened
			openedMu.Unlock()
			return func(ctx context.Context, calls []Call) {
				<-release // until the other call's answer is written
				rn := run{opened: n}
				if dl, ok := ctx.Deadline(); ok {
					rn.deadline = time.Until(dl)
				}
				for i := range calls {
					c := &calls[i]
					rn.ins = append(rn.ins, bytes.Clone(c.In))
					if c.In[0] == 0xff {
						c.Err = status.Error(codes.InvalidArgument, "bad")
						continue
					}
					c.Out = append(c.Out, c.In...)
				}
				runs <- rn
			}
		}},
	}, func(ln net.Listener) net.Listener { return recordingListener{ln, &mu, &writes} })
	r := dialSettled(t, addr)
	mu.Lock()
	before := len(writes)
	mu.Unlock()
	writeTogether(t, r, func() {
		for i, id := range []uint32{1, 3, 5} {
			r.headers(id, "/t.S/Echo", false, "grpc-timeout", strconv.Itoa(i+1)+"S")
			r.message(id, []byte{[]byte{1, 0xff, 5}[i]})
		}
		r.headers(7, "/t.S/Other", false)
		r.message(7, []byte{7})
	})
	other, otherCode := answers(t, r, 7)
	close(release)
	msgs, codes := answers(t, r, 1, 3, 5)
	msgs[7], codes[7] = other[7], otherCode[7]
	for id, want := range map[uint32]string{1: "\x01", 5: "\x05", 7: "\x07"} {
		if string(msgs[id]) != want || codes[id] != "0" {
			t.Errorf("stream %d: %q status %s, want %q status 0", id, msgs[id], codes[id], want)
		}
	}
	if codes[3] != "3" || len(msgs[3]) != 0 {
		t.Errorf("stream 3: %q status %s, want no message and InvalidArgument (3)", msgs[3], codes[3])
	}
	rn := <-runs
	if len(runs) > 0 {
		t.Fatalf("%d more batches", len(runs))
	}
	if len(rn.ins) != 3 || rn.ins[0][0] != 1 || rn.ins[1][0] != 0xff || rn.ins[2][0] != 5 {
		t.Errorf("batch of %v, want the three Echo calls in the order read", rn.ins)
	}
	openedMu.Lock()
	if rn.opened != 1 || opened != 1 {
		t.Errorf("batch method called %d times, serving the batch of call %d; want one batch", opened, rn.opened)
	}
	openedMu.Unlock()
	if rn.deadline < 2*time.Second || rn.deadline > 3*time.Second {
		t.Errorf("batch deadline in %v, want the latest of the calls' (3s)", rn.deadline)
	}

	// The batch's answers went out in one write.
	mu.Lock()
	defer mu.Unlock()
	inWrite := map[uint32]int{}
	for i, w := range writes[before:] {
		for _, f := range frames(t, w) {
			if _, ok := f.(*http2.HeadersFrame); ok {
				inWrite[f.Header().StreamID] = i
			}
		}
	}
	if inWrite[1] != inWrite[3] || inWrite[3] != inWrite[5] {
		t.Errorf("the batch's answers were written apart: %v", inWrite)
	}
}

// TestBatchOverOutputBound: a batch whose answers pass MaxOutput still gets
// them all written, while the peer reads.
func TestBatchOverOutputBound(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3000)
	_, addr := serve(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": serveBatch(func(_ context.Context, calls []Call) {
			for i := range calls {
				calls[i].Out = append(calls[i].Out, big...)
			}
		})},
		MaxOutput: 1 << 10,
	})
	r := dialSettled(t, addr)
	ids := []uint32{1, 3, 5, 7, 9}
	writeTogether(t, r, func() {
		for _, id := range ids {
			r.headers(id, "/t.S/Echo", false)
			r.message(id, []byte{1})
		}
	})
	msgs, codes := answers(t, r, ids...)
	for _, id := range ids {
		if len(msgs[id]) != len(big) || codes[id] != "0" {
			t.Errorf("stream %d: %d bytes status %s", id, len(msgs[id]), codes[id])
		}
	}
}

func TestBatchWithoutMethod(t *testing.T) {
	_, err := NewServer(Options{Batches: map[string]BatchMethod{"/a/B": nil}})
	if err == nil {
		t.Fatal("a batch method that is not a unary method was accepted")
	}
}

// serveBatch is a batch method with nothing to get ready.
func serveBatch(serve BatchServe) BatchMethod {
	return func() BatchServe { return serve }
}
