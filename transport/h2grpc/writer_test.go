package h2grpc

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOneWriterAtATime: the socket's write side has one owner at a time —
// no two writes on a connection overlap — and the owners are the
// connection's writer and batch workers that found it idle, whatever the
// reader, the workers and the timers queue. Before the writer, whichever
// worker appended while no write was in progress wrote the buffer itself,
// and the reader spawned goroutines to write its own frames: those fail
// here as a connection written by more than one goroutine that served no
// batch; a batch worker writing beside the writer fails as an overlap.
func TestOneWriterAtATime(t *testing.T) {
	var mu sync.Mutex
	writers := map[*writerConn]map[uint64]int{}
	batchers := map[uint64]bool{} // goroutines that served a batch
	overlaps := 0
	wrap := func(ln net.Listener) net.Listener {
		return &acceptWrap{Listener: ln, wrap: func(c net.Conn) net.Conn {
			rc := &writerConn{Conn: c}
			rc.wrote = func(g uint64) {
				mu.Lock()
				defer mu.Unlock()
				if writers[rc] == nil {
					writers[rc] = map[uint64]int{}
				}
				writers[rc][g]++
			}
			rc.overlap = func() {
				mu.Lock()
				overlaps++
				mu.Unlock()
			}
			return rc
		}}
	}
	// Calls that arrive together run as a batch, whose worker finishes
	// with the whole batch queued: the moment a worker may take the write
	// side, and only if nobody holds it.
	_, addr := serveOn(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": serveBatch(func(_ context.Context, calls []Call) {
			mu.Lock()
			batchers[goroutineID()] = true
			mu.Unlock()
			for i := range calls {
				calls[i].Out = append(calls[i].Out, calls[i].In...)
			}
		})},
	}, wrap)
	cc := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				req := []byte(strconv.Itoa(w*1000 + i))
				var resp []byte
				if err := cc.Invoke(ctx, "/t.S/Echo", &req, &resp, callOpt()); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(req, resp) {
					errs <- errEcho
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(writers) == 0 {
		t.Fatal("no connection wrote")
	}
	if overlaps > 0 {
		t.Errorf("%d writes began while another write on the connection was in progress", overlaps)
	}
	for _, gs := range writers {
		others := map[uint64]int{}
		byBatch := 0
		for g, n := range gs {
			if batchers[g] {
				byBatch += n
			} else {
				others[g] = n
			}
		}
		if len(others) > 1 {
			t.Errorf("one connection written by %d goroutines that served no batch (writes per goroutine: %v), want one, its writer", len(others), others)
		}
		t.Logf("writes: %d by batch workers, %v by others", byBatch, others)
	}
}

var errEcho = net.UnknownNetworkError("echo differs")

type acceptWrap struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (a *acceptWrap) Accept() (net.Conn, error) {
	c, err := a.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return a.wrap(c), nil
}

// writerConn tells wrote which goroutine calls each Write, and overlap
// when a Write starts before another has returned.
type writerConn struct {
	net.Conn
	wrote    func(goroutine uint64)
	overlap  func()
	inflight atomic.Int32
}

func (c *writerConn) Write(p []byte) (int, error) {
	if c.inflight.Add(1) > 1 {
		c.overlap()
	}
	defer c.inflight.Add(-1)
	c.wrote(goroutineID())
	// Held a little longer than the syscall: a second owner has a window
	// to show itself in, however the goroutines are scheduled.
	runtime.Gosched()
	return c.Conn.Write(p)
}

// goroutineID is the running goroutine's number, from the first line of
// its stack ("goroutine 123 [running]:"); tests only.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}
