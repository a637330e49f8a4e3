package transport

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/transport/h2grpc"
)

// native sets the limits in the native server's options.
func nativeLimits(l Listen, o *h2grpc.Options) {
	o.MaxConcurrentStreams = uint32(l.MaxConcurrentStreams)
	o.IdleTimeout, o.StallTimeout = l.IdleTimeout, l.StallTimeout
}

// guard is what the guard of grpc-go's connections keeps (h2grpc.Guard).
func guardLimits(l Listen) h2grpc.GuardOptions {
	return h2grpc.GuardOptions{MaxOpenStreams: 2 * l.MaxConcurrentStreams}
}

// The native server's defaults that grpc-go is given too.
const (
	nativeStreamWindow = 64 << 10 // × MaxConcurrentStreams: 64 MiB per connection, the native MaxRequestBytes
	nativeConnWindow   = 8 << 20
	nativeHeaderList   = 64 << 10
)

// grpcGo is grpc-go's server options for the limits, with keepalive's
// connection age: a static window (grpc-go's dynamic one grows to 16 MiB a
// stream), the native server's header list size, pings as the native
// server takes them (a second apart; a flood is cut off after three).
// Write buffers are released while a connection is quiet (grpc-go's
// default since SharedWriteBuffer was deprecated).
func grpcGoLimits(l Listen) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.IdleTimeout,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.StaticStreamWindowSize(nativeStreamWindow),
		grpc.StaticConnWindowSize(nativeConnWindow),
		grpc.MaxHeaderListSize(nativeHeaderList),
	}
}

// guardedCreds guards grpc-go's connections after its TLS handshake (the
// guard reads HTTP/2 frames, which TLS hides from a listener's).
type guardedCreds struct {
	credentials.TransportCredentials
	o h2grpc.GuardOptions
}

func (c guardedCreds) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(nc)
	if err != nil {
		return nil, nil, err
	}
	return h2grpc.Guard(conn, c.o), info, nil
}

func (c guardedCreds) Clone() credentials.TransportCredentials {
	return guardedCreds{TransportCredentials: c.TransportCredentials.Clone(), o: c.o}
}

// guardedDesc is desc with each handler's first receive bounded by stall
// and its unmarshalling failures INVALID_ARGUMENT (see guardedRecv), and
// its streams started through gate (see guardedStream).
func guardedDesc(desc *grpc.ServiceDesc, stall time.Duration, gate *h2grpc.StartGate) *grpc.ServiceDesc {
	d := *desc
	d.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range d.Methods {
		h := d.Methods[i].Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, guardedRecv(ctx, stall, dec), ic)
		}
	}
	d.Streams = append([]grpc.StreamDesc(nil), desc.Streams...)
	for i := range d.Streams {
		h := d.Streams[i].Handler
		d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			if p, _ := ss.Context().Value(tapPassKey{}).(*h2grpc.Pass); p != nil {
				p.Done() // running: its start is the first message's now
			}
			g := &guardedStream{ServerStream: ss, gate: gate}
			g.first = guardedRecv(ss.Context(), stall, ss.RecvMsg)
			defer g.started()
			return h(srv, g)
		}
	}
	return &d
}

// guardedStream is a stream whose method starts through the start gate
// (h2grpc's StartGate: a burst of new streams, each a runnable goroutine
// setting itself up, delayed every established stream's answers). grpc-go
// has started the method's goroutine already; it waits for a slot, parked,
// once its first message has come (a stream that sends nothing takes
// none), and gives it back when the method asks for the next message,
// sends, or returns.
type guardedStream struct {
	grpc.ServerStream
	first func(any) error // nil once used
	gate  *h2grpc.StartGate
	pass  atomic.Pointer[h2grpc.Pass]
}

func (g *guardedStream) RecvMsg(m any) error {
	if f := g.first; f != nil {
		g.first = nil
		if err := f(m); err != nil {
			return err
		}
		p, err := g.gate.Wait(g.Context())
		if err != nil {
			return status.FromContextError(err).Err()
		}
		g.pass.Store(p)
		return nil
	}
	g.started()
	return recvDecoded(g.ServerStream.RecvMsg, m)
}

func (g *guardedStream) SendMsg(m any) error {
	g.started()
	return g.ServerStream.SendMsg(m)
}

func (g *guardedStream) started() { g.pass.Swap(nil).Done() }

// guardedRecv is recv answering the call DEADLINE_EXCEEDED if no message
// has come within stall, as the native server does: writing the status
// ends the stream, and so the receive waiting for it.
func guardedRecv(ctx context.Context, stall time.Duration, recv func(any) error) func(any) error {
	return func(m any) error {
		w, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ WriteStatus(*status.Status) error })
		if !ok {
			return recvDecoded(recv, m)
		}
		t := time.AfterFunc(stall, func() { _ = w.WriteStatus(status.New(codes.DeadlineExceeded, h2grpc.StallMessage)) })
		err := recvDecoded(recv, m)
		if !t.Stop() {
			return status.Error(codes.DeadlineExceeded, h2grpc.StallMessage)
		}
		return err
	}
}

// decodeLater is a message to receive whose decoding failure the codec
// (rlsCodec) keeps instead of failing the receive: grpc-go would answer
// that INTERNAL itself, before the handler could say otherwise.
type decodeLater struct {
	v   any
	err error
}

// recvDecoded receives m by recv, a malformed message being
// INVALID_ARGUMENT, as on the native server: the caller's error.
func recvDecoded(recv func(any) error, m any) error {
	d := decodeLater{v: m}
	if err := recv(&d); err != nil {
		return err
	}
	if d.err != nil {
		return errUnmarshal(d.err)
	}
	return nil
}

// tapPassKey is the context key of a stream's pass from setupTap.
type tapPassKey struct{}

// tapWait is the longest setupTap holds a connection's reader. Measured
// on streams:10000 (loadtest/rlqs -flood, grpc-go, quiet machine), the
// probe's worst answer: 77-249 ms without the tap (10 of 15 runs over
// 200 ms), 29-230 ms with it (1 of 12); waiting 200 ms instead of 50 did
// no better and answered the burst later (1.06-1.56 s against 1.0-1.3 s).
const tapWait = 50 * time.Millisecond

// setupTap makes a new streaming call of one of methods wait for a start
// gate slot before grpc-go creates its goroutine: it runs on the
// connection's reader, which stops reading meanwhile, so a burst of new
// streams arrives as fast as their goroutines get to run rather than all
// at once (grpc-go gives no other hook before the goroutine exists). The
// slot is given back when the method's handler starts. A reader waits
// wait at most, then the call starts without a slot: while the gate is
// full, a connection's frames wait that long behind a new stream, no more.
func setupTap(gate *h2grpc.StartGate, methods map[string]bool, wait time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if !methods[info.FullMethodName] {
			return ctx, nil
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		p, err := gate.Wait(wctx)
		if err != nil {
			return ctx, nil
		}
		return context.WithValue(ctx, tapPassKey{}, p), nil
	}
}

// streamingMethods adds the full names of desc's streaming methods to m.
func streamingMethods(desc *grpc.ServiceDesc, m map[string]bool) {
	for _, st := range desc.Streams {
		m["/"+desc.ServiceName+"/"+st.StreamName] = true
	}
}
