package h2grpc

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestOneWriterPerConnection: every write on a connection comes from one
// goroutine, whatever the reader, the workers and the timers queue. Before,
// whichever worker appended while no write was in progress wrote the
// buffer itself, and the reader spawned goroutines to write its own frames.
func TestOneWriterPerConnection(t *testing.T) {
	var mu sync.Mutex
	writers := map[*writerConn]map[uint64]int{}
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
			return rc
		}}
	}
	// Calls that arrive together run as a batch, whose worker finishes
	// with the whole batch queued: the moment a worker could be tempted
	// to write itself.
	_, addr := serveOn(t, Options{
		Methods: map[string]Method{"/t.S/Echo": echo},
		Batches: map[string]BatchMethod{"/t.S/Echo": serveBatch(func(_ context.Context, calls []Call) {
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
	for _, gs := range writers {
		if len(gs) != 1 {
			t.Errorf("one connection written by %d goroutines (writes per goroutine: %v), want one", len(gs), gs)
		}
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

// writerConn tells wrote which goroutine calls each Write.
type writerConn struct {
	net.Conn
	wrote func(goroutine uint64)
}

func (c *writerConn) Write(p []byte) (int, error) {
	c.wrote(goroutineID())
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
