package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport"
)

// The server's parts live by concern: backends.go (stores and shards),
// reload.go and files.go (configuration sources and loading), ops.go
// (statistics sink, TLS, xDS, tracing), health.go; the wire is package
// transport's.

// Options assemble a Server. Only Settings is required.
type Options struct {
	Settings settings.Settings
	Logger   *slog.Logger
	Stats    *stats.Store
	Clock    func() time.Time
	// GRPCServerOptions are added to the gRPC server's (TLS credentials, interceptors).
	GRPCServerOptions []grpc.ServerOption
	// DebugEndpoints are extra debug paths.
	DebugEndpoints map[string]DebugEndpoint
	// MetricsCollectors are served by the pull metrics endpoint beside the
	// statistics (USE_PROMETHEUS), so one scrape has both.
	MetricsCollectors []prometheus.Collector
	// StatsOutput receives the standard-output statistics sink (USE_STATSD=false); os.Stdout when nil.
	StatsOutput io.Writer
}

// Server is the rate limit service: engine, shards, backends, the quota
// service and the wire. NewServer builds every part; Run starts them and
// stops them again.
type Server struct {
	settings settings.Settings
	opts     Options
	log      *slog.Logger
	stats    *stats.Store
	health   *health
	ghs      *grpchealth.Server

	ops      ops // statistics sink, TLS, xDS and tracing
	counters *counters
	svc      *engine.Service
	loader   *loader
	// wire is the gRPC, HTTP and debug servers, built by Run.
	wire atomic.Pointer[transport.Server]
}

// DebugEndpoint is an extra debug path (Options.DebugEndpoints).
type DebugEndpoint = transport.DebugEndpoint

// NewServer builds the backend (waiting for it to answer, as the reference
// does before opening any listener), the shards and the engine. On error
// whatever it had built is closed again.
func NewServer(ctx context.Context, o Options) (_ *Server, err error) {
	s := o.Settings
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stats == nil {
		o.Stats = stats.NewStore()
	}
	o.Stats.SetDynamicLimit(s.Limiter.StatsMaxDynamic, stats.DefaultMaxDynamicNameSize)
	srv := &Server{settings: s, opts: o, log: o.Logger, stats: o.Stats, ghs: grpchealth.NewServer()}
	srv.health = newHealth(srv.ghs, s.Config.HealthyWithConfig)

	// The reporter is built before the shards but flushes only once Run has
	// started, when they exist.
	if srv.ops, err = newOps(s, o, o.Stats, srv.publishShardDepth); err != nil {
		return nil, err
	}
	src, err := newConfigSource(s, o, srv.ops.xds)
	if err != nil {
		return nil, err
	}

	c, err := newCounters(ctx, s, o, srv.ops.backendTracer())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	srv.health.set(componentBackend, true)

	eo := s.Limiter.Options
	eo.Counter = srv.ops.traceCounter(c.lease)
	eo.Stats = o.Stats
	eo.Clock = o.Clock
	eo.KeyValidator = c.back.validator
	if s.Limiter.LocalCacheSizeBytes > 0 {
		eo.LocalCache = actors.NewOverLimitCache(s.Limiter.LocalCacheSizeBytes, o.Clock, o.Stats)
	}
	if srv.svc, err = engine.NewService(eo); err != nil {
		return nil, err
	}
	srv.counters = c
	srv.loader = newLoader(s, o, src, srv.svc, srv.health)
	return srv, nil
}

// wireOptions are the wire's parts: the decision call (traced when tracing
// is on), the counters' batches, the quota service, health and the
// listeners' settings.
func (s *Server) wireOptions(q *quota.Service) transport.Options {
	o := transport.Options{
		Listen: listen(s.settings.Listen), Logger: s.log, Stats: s.stats,
		Decider:   s.ops.decider(s.svc),
		OpenBatch: s.counters.router.OpenBatch,
		Quota:     q,
		Healthy:   s.health.ok, GRPCHealth: s.ghs,
		DumpConfig: s.DumpConfig, DebugEndpoints: s.opts.DebugEndpoints,
		ErrorLogInterval:  s.settings.Log.RepeatInterval,
		GRPCServerOptions: append(append([]grpc.ServerOption{}, s.opts.GRPCServerOptions...), s.ops.grpcServerOptions()...),
		// The native gRPC server does TLS itself; interceptors and stats
		// handlers (the embedder's, tracing) exist only in grpc-go's.
		NativeAllowed: len(s.opts.GRPCServerOptions) == 0 && s.ops.tracing == nil,
		// A refused connection is told so in plaintext HTTP/2 only where
		// the port speaks it (no TLS, no embedder's credentials).
		PlainGRPC: len(s.opts.GRPCServerOptions) == 0 && s.ops.tls == nil,
		WrapHTTP:  s.ops.traceHTTP,
	}
	if s.ops.tls != nil {
		o.TLS = s.ops.tls.TLSConfig()
	}
	return o
}

// listen is where the wire listens, as the settings say.
func listen(l settings.ListenSettings) transport.Listen {
	caps := l.MaxConnections.Resolved()
	return transport.Listen{
		GRPCAddr: l.GRPCAddr(), GRPCUDS: l.GRPCUDS, HTTPAddr: l.HTTPAddr(), DebugAddr: l.DebugAddr(),
		GRPCGo:           l.GRPCServer == settings.GRPCServerGRPCGo,
		StreamWorkers:    l.GRPCStreamWorkers,
		MaxConnectionAge: l.MaxConnectionAge, MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		MaxConcurrentStreams: l.GRPCLimits.MaxConcurrentStreams,
		IdleTimeout:          l.GRPCLimits.IdleTimeout, StallTimeout: l.GRPCLimits.StallTimeout,
		HTTPServer:   l.HTTPTimeouts.Server,
		MaxGRPCConns: caps.GRPC, MaxHTTPConns: caps.HTTP, MaxDebugConns: caps.Debug,
	}
}

// publishShardDepth sets the shards' queue depth gauges (none before the
// shards exist).
func (s *Server) publishShardDepth() {
	if s.counters != nil {
		s.counters.publishShardDepth()
	}
}

// Addrs are the bound addresses (zero until Run listens).
func (s *Server) Addrs() transport.Addrs {
	if w := s.wire.Load(); w != nil {
		return w.Addrs()
	}
	return transport.Addrs{}
}

// MetricsAddr is the pull metrics listener's address (USE_PROMETHEUS), or nil.
func (s *Server) MetricsAddr() net.Addr { return s.ops.metrics.Addr() }

// DumpConfig is the loaded configuration as the debug server's /rlconfig
// prints it ("" before any).
func (s *Server) DumpConfig() string {
	if c := s.svc.Config(); c != nil {
		return c.Dump()
	}
	return ""
}

// Run loads configuration, listens, and serves until ctx ends; then it stops
// gracefully: in-flight calls finish, then shards and backends close.
// ready, if not nil, is closed once the listeners are open.
func (s *Server) Run(ctx context.Context, ready chan<- struct{}) error {
	cfgCtx, stopConfig := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	first := s.startConfig(cfgCtx, &bg)
	var (
		q    *quota.Service
		wire *transport.Server
	)
	defer func() {
		stopConfig()
		bg.Wait()
		if wire != nil {
			wire.Close()
		}
		if q != nil {
			closeQuota(q)
		}
		s.counters.Close()
		s.ops.close() // last, so the final statistics flush sees everything
	}()
	if err := s.ops.start(cfgCtx, &bg); err != nil {
		return err
	}
	q, err := s.newQuota()
	if err != nil {
		return err
	}
	if wire, err = transport.New(s.wireOptions(q)); err != nil {
		return err
	}
	s.wire.Store(wire)

	if !s.settings.Config.ForceStart {
		select {
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}
	return wire.Run(ctx, ready, func() { s.health.set(componentSigterm, false) })
}

// startConfig starts the configuration source, its loader and the backend
// health watch, all ending with ctx and joining bg; the channel closes once
// the first configuration event is applied (or the source ended without
// one).
func (s *Server) startConfig(ctx context.Context, bg *sync.WaitGroup) <-chan struct{} {
	events := make(chan ConfigEvent)
	bg.Add(1)
	go func() {
		defer bg.Done()
		if err := s.loader.source.Run(ctx, events); err != nil {
			s.log.Error("configuration source stopped", "error", err)
		}
	}()
	if len(s.counters.back.health) > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); s.watchBackendHealth(ctx) }()
	}
	first := make(chan struct{})
	bg.Add(1)
	go func() {
		defer bg.Done()
		once := sync.OnceFunc(func() { close(first) })
		defer once()
		for ev := range events {
			if !s.loader.applyWithin(ctx, ev) {
				return // shutting down: never wait for a parse
			}
			once()
		}
	}()
	return first
}

// newQuota is the Rate Limit Quota Service, counting through the same
// (traced) leases as the decisions.
func (s *Server) newQuota() (*quota.Service, error) {
	o := s.settings.Limiter.Quota
	o.Log = s.log
	o.Budget = s.counters.back.budget // the quota service's buckets count in the memory cap
	return quota.New(o, s.svc, s.ops.traceCounter(s.counters.lease), s.counters.back.board, s.stats)
}

// closeQuota stops the quota service; its streams must have ended. What
// this replica holds beyond what its Envoys may spend until they reach
// another replica is given back first (within a few seconds).
func closeQuota(q *quota.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	q.Drain(ctx)
	q.Close()
}

// watchBackendHealth mirrors the stores' own health into the service's
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION); it ends with ctx.
func (s *Server) watchBackendHealth(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		s.health.set(componentBackend, s.counters.back.Healthy())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
