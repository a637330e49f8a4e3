package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/transport/h2grpc"
)

// Addrs are the bound addresses, known once Run has started listening.
type Addrs struct{ GRPC, HTTP, Debug net.Addr }

// listeners are the gRPC, HTTP and debug servers of one Run.
type listeners struct {
	opts Listen
	// grpcOpts are added to the gRPC server's own: the caller's, then TLS
	// and tracing.
	grpcOpts []grpc.ServerOption
	// nativeOK says the native gRPC server can stand in for grpc-go's (no
	// server options it cannot honour), with nativeTLS if TLS is on.
	nativeOK  bool
	nativeTLS *tls.Config
	plainGRPC bool // see accept.go
	debugEnd  map[string]DebugEndpoint
	stats     *stats.Store

	grpc        grpcServer
	http, debug *drainServer

	mu    sync.Mutex
	addrs Addrs

	perMethod sync.Map // full gRPC method → *methodStats
}

// Addrs are the bound addresses (zero until listen).
func (n *listeners) Addrs() Addrs {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs
}

// serve listens and serves the handlers of s until shutdown; each server's
// end arrives on the channel, three in all.
func (n *listeners) serve(s *Server) (<-chan error, error) {
	lns, err := n.listen()
	if err == nil {
		lns, err = n.guard(lns, s.log) // accept.go
	}
	if err != nil {
		return nil, err
	}
	if !n.opts.GRPCGo && n.nativeOK {
		if n.nativeTLS != nil {
			lns[0] = tls.NewListener(lns[0], h2grpc.TLSConfig(n.nativeTLS))
		}
		ns, err := n.nativeServer(s)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, err
		}
		n.grpc = ns
	} else {
		if n.nativeTLS == nil {
			// With TLS, the credentials guard the connections.
			lns[0] = h2grpc.GuardListener(lns[0], guardLimits(n.opts))
		}
		n.grpc = n.newGRPCServer(s)
	}
	n.http = newDrainServer(n.opts.HTTPServer(s.wrapHTTP(newHTTPHandler(s.decider(), s.o.Healthy, s.log, s.errs))))
	n.debug = newDrainServer(n.opts.HTTPServer(newDebugHandler(s.dumpConfig, n.debugEnd)))
	errc := make(chan error, 3)
	go func() { errc <- n.grpc.Serve(lns[0]) }()
	go func() { errc <- n.http.Serve(lns[1]) }()
	go func() { errc <- n.debug.Serve(lns[2]) }()
	return errc, nil
}

// served waits for the ends of the servers still running (n of them) and
// reports the first failure, counting a graceful stop as none.
func served(errc <-chan error, n int) error {
	var first error
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, h2grpc.ErrServerStopped) && first == nil {
			first = err
		}
	}
	return first
}

// shutdown stops accepting, lets in-flight requests finish (bounded), and
// closes the listeners.
func (n *listeners) shutdown() {
	const grace = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan struct{})
	go func() { n.grpc.GracefulStop(); close(done) }()
	var wg sync.WaitGroup
	for _, srv := range []*drainServer{n.http, n.debug} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.drain(ctx) }()
	}
	wg.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		n.grpc.Stop()
		<-done
	}
}

func (n *listeners) newGRPCServer(s *Server) *grpc.Server {
	l := n.opts
	opts := append(grpcGoLimits(l),
		grpc.ChainUnaryInterceptor(n.statsInterceptor),
		// RLS messages are coded by hand (wire.go); the rest by protobuf.
		grpc.ForceServerCodecV2(newRLSCodec()),
	)
	if l.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(l.StreamWorkers)))
	}
	opts = append(opts, n.grpcOpts...)
	if n.nativeTLS != nil {
		// After the TLS option of grpcOpts, which it replaces.
		opts = append(opts, grpc.Creds(guardedCreds{credentials.NewTLS(n.nativeTLS), guardLimits(l)}))
	}
	rls := newRLSServer(s.decider(), s.log, s.errs)
	services := []struct {
		desc *grpc.ServiceDesc
		impl any
	}{{rls.serviceDesc(), rls}, {&healthpb.Health_ServiceDesc, s.ghs}, {s.quota.serviceDesc(), s.quota}}
	gate := h2grpc.NewDefaultStartGate()
	methods := make(map[string]bool)
	for _, sv := range services {
		streamingMethods(sv.desc, methods)
	}
	opts = append(opts, grpc.InTapHandle(setupTap(gate, methods, tapWait)))
	g := grpc.NewServer(opts...)
	for _, sv := range services {
		g.RegisterService(guardedDesc(sv.desc, l.StallTimeout, gate), sv.impl)
	}
	reflection.Register(g) // grpc.reflection.v1 and v1alpha (reflection.go)
	return g
}

// statsInterceptor counts ratelimit_server.<Method>.total_requests and
// .response_time, as the reference's gRPC interceptor.
func (n *listeners) statsInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer n.methodStats(info.FullMethod).observe(time.Now())
	return h(ctx, req)
}

type methodStats struct {
	total *stats.Counter
	time  *stats.Timer
}

// observe counts a call that began at start.
func (ms *methodStats) observe(start time.Time) {
	ms.total.Inc()
	ms.time.Record(time.Since(start))
}

// methodStats resolves a gRPC method's stats once (the names never change).
func (n *listeners) methodStats(full string) *methodStats {
	if v, ok := n.perMethod.Load(full); ok {
		return v.(*methodStats)
	}
	method := full
	if i := lastSlash(method); i >= 0 {
		method = method[i+1:]
	}
	ms := &methodStats{
		total: n.stats.Counter("ratelimit_server." + method + ".total_requests"),
		time:  n.stats.Timer("ratelimit_server." + method + ".response_time"),
	}
	v, _ := n.perMethod.LoadOrStore(full, ms)
	return v.(*methodStats)
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// listen opens gRPC, HTTP and debug listeners, TCP with SO_REUSEPORT as the
// reference, or gRPC on a unix socket with GRPC_UDS.
func (n *listeners) listen() ([3]net.Listener, error) {
	var lns [3]net.Listener
	l := n.opts
	var err error
	closeAll := func() {
		for _, ln := range lns {
			if ln != nil {
				ln.Close()
			}
		}
	}
	if l.GRPCUDS != "" {
		_ = os.Remove(l.GRPCUDS) // a stale socket from a previous run
		lns[0], err = net.Listen("unix", l.GRPCUDS)
	} else {
		lns[0], err = listenReusePort(l.GRPCAddr)
	}
	if err == nil {
		lns[1], err = listenReusePort(l.HTTPAddr)
	}
	if err == nil {
		lns[2], err = listenReusePort(l.DebugAddr)
	}
	if err != nil {
		closeAll()
		return lns, fmt.Errorf("listening: %w", err)
	}
	n.mu.Lock()
	n.addrs = Addrs{GRPC: lns[0].Addr(), HTTP: lns[1].Addr(), Debug: lns[2].Addr()}
	n.mu.Unlock()
	return lns, nil
}

func listenReusePort(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
