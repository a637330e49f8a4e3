package transport

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/transport/h2grpc"
)

// TestGRPCGoStreamsStartThroughGate: on grpc-go's server a new stream
// takes a start gate slot at its HEADERS (setupTap) until its handler
// starts, and again once its first message has come until its method asks
// for the next or sends: streams that sent nothing, one whose method waits
// for its second message and ones answered never hold a later stream back
// (one slot, never taken back by time here, and a tap that waits an hour).
func TestGRPCGoStreamsStartThroughGate(t *testing.T) {
	gate := h2grpc.NewStartGate(1, time.Hour)
	echo := func(_ any, ss grpc.ServerStream) error {
		for {
			var m wireBytes
			if err := ss.RecvMsg(&m); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if string(m) == "wait" {
				continue // waits for the next, not answered
			}
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
	}
	desc := &grpc.ServiceDesc{ServiceName: "t.S", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Echo", ServerStreams: true, ClientStreams: true, Handler: echo}}}
	methods := make(map[string]bool)
	streamingMethods(desc, methods)
	g := grpc.NewServer(grpc.ForceServerCodecV2(newRLSCodec()), grpc.InTapHandle(setupTap(gate, methods, time.Hour)))
	g.RegisterService(guardedDesc(desc, time.Hour, gate), struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// Bounded only for a gate that never lets them start (the failure).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sd := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	for range 3 { // headers only
		if _, err := cc.NewStream(ctx, sd, "/t.S/Echo", grpc.ForceCodecV2(newRLSCodec())); err != nil {
			t.Fatal(err)
		}
	}
	waiting, err := cc.NewStream(ctx, sd, "/t.S/Echo", grpc.ForceCodecV2(newRLSCodec()))
	if err != nil {
		t.Fatal(err)
	}
	if err := waiting.SendMsg(wireBytes("wait")); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b", "c"} { // each stays open
		cs, err := cc.NewStream(ctx, sd, "/t.S/Echo", grpc.ForceCodecV2(newRLSCodec()))
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wireBytes(name)); err != nil {
			t.Fatal(err)
		}
		var got wireBytes
		if err := cs.RecvMsg(&got); err != nil || string(got) != name {
			t.Fatalf("stream %d, after 3 that sent nothing, one waiting for its second message and %d answered, one slot: %q %v", i, i, got, err)
		}
	}
}

// TestSetupTap: a new streaming call waits at the tap for a start gate
// slot and carries it to its handler; a unary call never waits; a call
// that waited its bound starts without one.
func TestSetupTap(t *testing.T) {
	gate := h2grpc.NewStartGate(1, time.Hour)
	methods := map[string]bool{"/t.S/Stream": true}
	held, err := gate.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	passOf := func(ctx context.Context) *h2grpc.Pass { p, _ := ctx.Value(tapPassKey{}).(*h2grpc.Pass); return p }

	// The gate's one slot is held: a unary call goes on at once, without
	// a slot, and a stream bounded by a millisecond too.
	ctx, err := setupTap(gate, methods, time.Hour)(context.Background(), &tap.Info{FullMethodName: "/t.S/Unary"})
	if err != nil || passOf(ctx) != nil {
		t.Fatalf("unary call: pass %v, %v; want none and no error", passOf(ctx), err)
	}
	ctx, err = setupTap(gate, methods, time.Millisecond)(context.Background(), &tap.Info{FullMethodName: "/t.S/Stream"})
	if err != nil || passOf(ctx) != nil {
		t.Fatalf("stream past its wait: pass %v, %v; want none and no error", passOf(ctx), err)
	}

	// A stream waits for the slot: it gets it once the holder gives it
	// back (a tap that did not wait would have returned without one).
	got := make(chan context.Context, 1)
	go func() {
		ctx, _ := setupTap(gate, methods, time.Hour)(context.Background(), &tap.Info{FullMethodName: "/t.S/Stream"})
		got <- ctx
	}()
	held.Done()
	p := passOf(<-got)
	if p == nil {
		t.Fatal("the stream started without the slot")
	}
	p.Done()
}
