package h2grpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// starts records the calls a gate started, in order.
type starts struct {
	mu     sync.Mutex
	passes []*Pass
	names  []int
}

func (s *starts) start(name int) func(*Pass) {
	return func(p *Pass) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.passes = append(s.passes, p)
		s.names = append(s.names, name)
	}
}

func (s *starts) started() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.names...)
}

func (s *starts) pass(i int) *Pass {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passes[i]
}

// TestStartGate: at most n calls hold a slot; the others start in the
// order they came as slots are given back (once each: a second Done gives
// nothing); a waiter that gives up leaves the queue.
func TestStartGate(t *testing.T) {
	g := NewStartGate(2, time.Hour)
	var s starts
	for i := range 5 {
		g.start(s.start(i))
	}
	if got := s.started(); len(got) != 2 {
		t.Fatalf("started %v with 2 slots, want [0 1]", got)
	}
	s.pass(0).Done()
	s.pass(0).Done() // nothing more
	if got := s.started(); len(got) != 3 || got[2] != 2 {
		t.Fatalf("started %v after one Done (twice), want [0 1 2]", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		_, err := g.Wait(ctx)
		waited <- err
	}()
	testenv.Eventually(t, "the waiter queued", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue) == 3
	})
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with its context cancelled: %v", err)
	}
	for i := 1; i < 5; i++ {
		s.pass(i).Done()
	}
	if got := s.started(); len(got) != 5 || got[3] != 3 || got[4] != 4 {
		t.Fatalf("started %v, want [0 1 2 3 4] (the waiter that gave up out of the queue)", got)
	}
	p, err := g.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait with free slots: %v", err)
	}
	p.Done()
}

// TestStartGateTakesBackHeldSlots: a call that never gives its slot back
// (a method stuck before it waits for a message) delays the next call by
// hold, never for good; its late Done frees nothing.
func TestStartGateTakesBackHeldSlots(t *testing.T) {
	g := NewStartGate(1, 20*time.Millisecond)
	var s starts
	g.start(s.start(0)) // never Done
	g.start(s.start(1))
	testenv.Eventually(t, "the second call started", func() bool { return len(s.started()) == 2 })
	s.pass(0).Done() // late: the slot is the second call's now
	g.start(s.start(2))
	if got := s.started(); len(got) != 2 {
		t.Fatalf("started %v: a late Done freed the slot the second call holds", got)
	}
	s.pass(1).Done()
	if got := s.started(); len(got) != 3 {
		t.Fatalf("started %v after the second call's Done, want [0 1 2]", got)
	}
}

// TestStreamsStartThroughGate: on the server, a stream holds its slot
// only while it starts. Streams whose clients sent nothing give theirs
// back once their method waits to receive, and stream methods that send
// at once give theirs back as they send, so that many such streams never
// hold a later stream back (the slots are never taken back by time here).
func TestStreamsStartThroughGate(t *testing.T) {
	waitFirst := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		_, err := recv()
		if err != nil {
			return err
		}
		return send([]byte("ok"))
	}
	sendFirst := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		if err := send([]byte("hello")); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	_, addr := serve(t, Options{BidiMethods: map[string]BidiMethod{"/t.S/Wait": waitFirst, "/t.S/Send": sendFirst},
		StartGate: NewStartGate(2, time.Hour)})
	cc := dial(t, addr)
	// Bounded only for a server that never starts them (the failure).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 6 {
		cs, err := cc.NewStream(ctx, bidiDesc, "/t.S/Wait", callOpt())
		if err != nil {
			t.Fatal(err)
		}
		_ = cs // headers only: its method waits for a first message
		cs2, err := cc.NewStream(ctx, bidiDesc, "/t.S/Send", callOpt())
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := cs2.RecvMsg(&got); err != nil || string(got) != "hello" {
			t.Fatalf("sending stream %d: %q %v", i, got, err)
		}
	}
	cs, err := cc.NewStream(ctx, bidiDesc, "/t.S/Wait", callOpt())
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("x")
	if err := cs.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := cs.RecvMsg(&got); err != nil || string(got) != "ok" {
		t.Fatalf("a stream after 12 started ones, 2 slots: %q %v", got, err)
	}
}
