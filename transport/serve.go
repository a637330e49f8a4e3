package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/quota"
)

// Options are what the wire serves and how. The assembly (package server)
// builds every part; the wire only answers calls with them.
type Options struct {
	// Listen are the addresses and the limits of each port's connections.
	Listen Listen
	Logger *slog.Logger
	Stats  *stats.Store

	// Decider decides every ShouldRateLimit, gRPC and /json.
	Decider Decider
	// OpenBatch, if not nil, holds the counters' backend calls for the
	// calls the native server reads together (actors.Router.OpenBatch).
	OpenBatch func() engine.Batch
	// Quota serves StreamRateLimitQuotas.
	Quota *quota.Service
	// Healthy is /healthcheck's answer; GRPCHealth is the gRPC health
	// service, whose status the caller keeps in step with it.
	Healthy    func() bool
	GRPCHealth *health.Server
	// DumpConfig is the debug server's /rlconfig.
	DumpConfig func() string
	// DebugEndpoints are extra debug paths.
	DebugEndpoints map[string]DebugEndpoint
	// ErrorLogInterval is how often a kind of failed decision is logged
	// (LOG_REPEAT_INTERVAL).
	ErrorLogInterval time.Duration

	// GRPCServerOptions are added to grpc-go's server (credentials,
	// interceptors, stats handlers). With any, grpc-go's server serves
	// even where the native one is chosen: it cannot honour them.
	GRPCServerOptions []grpc.ServerOption
	// NativeAllowed says nothing outside GRPCServerOptions needs grpc-go's
	// server either (tracing's stats handler does).
	NativeAllowed bool
	// TLS, if not nil, is the gRPC port's TLS (its credentials are also
	// among GRPCServerOptions for grpc-go's server); PlainGRPC says the
	// port speaks plaintext HTTP/2, so a refused connection can be told so.
	TLS       *tls.Config
	PlainGRPC bool
	// WrapHTTP, if not nil, wraps the /json handler (tracing spans).
	WrapHTTP func(http.Handler) http.Handler
}

// Listen is where the wire listens and how it bounds what clients hold.
type Listen struct {
	// GRPCAddr, HTTPAddr and DebugAddr are host:port (port 0: the kernel
	// picks one); GRPCUDS, if set, is a unix socket the gRPC port listens
	// on instead of GRPCAddr.
	GRPCAddr, GRPCUDS, HTTPAddr, DebugAddr string
	// GRPCGo has grpc-go's server serve the gRPC port where the native
	// one (h2grpc, about half its CPU per call) could.
	GRPCGo bool
	// StreamWorkers are the goroutines kept between calls to serve them
	// (0: a new goroutine per call).
	StreamWorkers int
	// MaxConnectionAge and MaxConnectionAgeGrace end a gRPC connection
	// that has lived that long (GOAWAY, then the grace for its calls).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MaxConcurrentStreams, IdleTimeout and StallTimeout bound what one
	// client may hold of the gRPC port, with either server: the calls a
	// connection may have open, how long it may go without one, and how
	// long a call's request message may take to follow its headers.
	MaxConcurrentStreams      int
	IdleTimeout, StallTimeout time.Duration
	// HTTPServer is the server of the HTTP and debug ports for a handler:
	// their timeouts.
	HTTPServer func(http.Handler) *http.Server
	// MaxGRPCConns, MaxHTTPConns and MaxDebugConns cap the connections
	// open at once on each port (0: no cap); one beyond is refused
	// politely (accept.go).
	MaxGRPCConns, MaxHTTPConns, MaxDebugConns int
}

// Server is the wire of one running service: the gRPC server (native or
// grpc-go's) with RLS, RLQS, health and reflection; the HTTP server with
// /json and /healthcheck; the debug server. Build it with New, serve with
// Run, and Close it once Run has returned (or was never called).
type Server struct {
	o     Options
	log   *slog.Logger
	errs  *errorLog // failed decisions, one line per interval and kind
	ghs   *health.Server
	quota *quotaServer
	net   *listeners
}

// New builds the servers' parts; nothing listens until Run.
func New(o Options) (*Server, error) {
	if o.Decider == nil || o.Healthy == nil || o.GRPCHealth == nil || o.Quota == nil {
		return nil, fmt.Errorf("transport: Decider, Healthy, GRPCHealth and Quota are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stats == nil {
		o.Stats = stats.NewStore()
	}
	if o.Listen.HTTPServer == nil {
		o.Listen.HTTPServer = func(h http.Handler) *http.Server { return &http.Server{Handler: h} }
	}
	s := &Server{o: o, log: o.Logger, ghs: o.GRPCHealth,
		errs:  newErrorLog(o.Logger, o.ErrorLogInterval),
		quota: newQuotaServer(o.Quota, o.Logger)}
	s.net = &listeners{opts: o.Listen, debugEnd: o.DebugEndpoints, stats: o.Stats,
		grpcOpts: o.GRPCServerOptions, nativeOK: o.NativeAllowed && len(o.GRPCServerOptions) == 0,
		nativeTLS: o.TLS, plainGRPC: o.PlainGRPC}
	return s, nil
}

// Addrs are the bound addresses (zero until Run listens).
func (s *Server) Addrs() Addrs { return s.net.Addrs() }

// Run listens and serves until ctx ends or a server stops by itself; then
// it calls stopping (the service turns unhealthy), ends the RLQS streams
// (the Envoys reconnect elsewhere) and drains the servers: in-flight calls
// are answered. ready, if not nil, is closed once the listeners are open.
func (s *Server) Run(ctx context.Context, ready chan<- struct{}, stopping func()) error {
	errc, err := s.net.serve(s)
	if err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	var runErr error
	running := 3
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		runErr = fmt.Errorf("server stopped: %w", runErr)
		running--
	}
	if stopping != nil {
		stopping()
	}
	s.quota.stopStreams()
	s.net.shutdown()
	if err := served(errc, running); runErr == nil {
		runErr = err
	}
	return runErr
}

// Close ends the RLQS streams still open and reports the failed
// decisions still counted.
func (s *Server) Close() {
	s.quota.stopStreams()
	s.errs.close()
}

// decider is the decision call of the gRPC and HTTP servers.
func (s *Server) decider() Decider { return s.o.Decider }

// wrapHTTP is the /json handler as the options wrap it.
func (s *Server) wrapHTTP(h http.Handler) http.Handler {
	if s.o.WrapHTTP == nil {
		return h
	}
	return s.o.WrapHTTP(h)
}

// dumpConfig is /rlconfig's text.
func (s *Server) dumpConfig() string {
	if s.o.DumpConfig == nil {
		return ""
	}
	return s.o.DumpConfig()
}
