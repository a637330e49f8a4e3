package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/settings"
)

// The server's parts live by concern: backends.go (stores and shards),
// listeners.go (gRPC, HTTP and debug servers), reload.go (configuration
// sources and loading), ops.go (statistics sink, TLS, xDS, tracing).

// Options assemble a Server. Only Settings is required.
type Options struct {
	Settings settings.Settings
	Logger   *slog.Logger
	Stats    *stats.Store
	Clock    func() time.Time
	// ConfigSource overrides the one Settings.Config describes.
	ConfigSource ConfigSource
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

// Server is the rate limit service: engine, shards, backends and listeners.
// NewServer builds every part; Run starts them and stops them again.
type Server struct {
	settings settings.Settings
	log      *slog.Logger
	stats    *stats.Store
	errs     *errorLog // failed decisions, one line per interval and kind
	health   *Health
	ghs      *health.Server

	ops      ops // statistics sink, TLS, xDS and tracing
	counters *counters
	svc      *engine.Service
	loader   *loader
	net      *listeners
	// quota serves the Rate Limit Quota Service on the gRPC port; it
	// exists while Run does.
	quota *quotaServer
}

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
	srv := &Server{settings: s, log: o.Logger, stats: o.Stats, ghs: health.NewServer()}
	srv.health = NewHealth(srv.ghs, s.Config.HealthyWithConfig)

	// The reporter is built before the shards but flushes only once Run has
	// started, when they exist.
	if srv.ops, err = newOps(s, o, o.Stats, srv.publishShardDepth); err != nil {
		return nil, err
	}
	src, err := configSource(s, o, srv.ops.xds)
	if err != nil {
		return nil, err
	}
	srv.net = &listeners{settings: s.Listen, debugEnd: o.DebugEndpoints, stats: o.Stats,
		grpcOpts: append(append([]grpc.ServerOption{}, o.GRPCServerOptions...), srv.ops.grpcServerOptions()...),
		// The native gRPC server does TLS itself; interceptors and stats
		// handlers (the embedder's, tracing) exist only in grpc-go's.
		nativeOK: len(o.GRPCServerOptions) == 0 && srv.ops.tracing == nil,
		// A refused connection is told so in plaintext HTTP/2 only where
		// the port speaks it (no TLS, no embedder's credentials).
		plainGRPC: len(o.GRPCServerOptions) == 0 && srv.ops.tls == nil}
	if srv.ops.tls != nil {
		srv.net.nativeTLS = srv.ops.tls.TLSConfig()
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
	srv.health.Set(ComponentBackend, true)

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
	srv.errs = newErrorLog(srv.log, s.Log.RepeatInterval)
	srv.loader = newLoader(s, o, src, srv.svc, srv.health)
	return srv, nil
}

// publishShardDepth sets the shards' queue depth gauges (none before the
// shards exist).
func (s *Server) publishShardDepth() {
	if s.counters != nil {
		s.counters.publishShardDepth()
	}
}

// Health is the service health.
func (s *Server) Health() *Health { return s.health }

// Stats is the statistics store.
func (s *Server) Stats() *stats.Store { return s.stats }

// Addrs are the bound addresses (zero until Run listens).
func (s *Server) Addrs() Addrs { return s.net.Addrs() }

// MetricsAddr is the pull metrics listener's address (USE_PROMETHEUS), or nil.
func (s *Server) MetricsAddr() net.Addr { return s.ops.metrics.Addr() }

// DumpConfig implements ConfigDumper.
func (s *Server) DumpConfig() string {
	if c := s.svc.Config(); c != nil {
		return c.Dump()
	}
	return ""
}

// decider is the decision call of the gRPC and HTTP servers.
func (s *Server) decider() Decider { return s.ops.decider(s.svc) }

// Run loads configuration, listens, and serves until ctx ends; then it stops
// gracefully: in-flight calls finish, then shards and backends close.
// ready, if not nil, is closed once the listeners are open.
func (s *Server) Run(ctx context.Context, ready chan<- struct{}) error {
	cfgCtx, stopConfig := context.WithCancel(context.Background())
	events := make(chan ConfigEvent)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		if err := s.loader.source.Run(cfgCtx, events); err != nil {
			s.log.Error("configuration source stopped", "error", err)
		}
	}()
	if len(s.counters.back.health) > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); s.watchBackendHealth(cfgCtx) }()
	}
	first := make(chan struct{})
	bg.Add(1)
	go func() {
		defer bg.Done()
		once := sync.OnceFunc(func() { close(first) })
		defer once()
		for ev := range events {
			if !s.loader.applyWithin(cfgCtx, ev) {
				return // shutting down: never wait for a parse
			}
			once()
		}
	}()
	defer func() {
		stopConfig()
		bg.Wait()
		if s.quota != nil {
			s.quota.close()
		}
		s.counters.Close()
		s.errs.close()
		s.ops.close() // last, so the final statistics flush sees everything
	}()
	if err := s.ops.start(cfgCtx, &bg); err != nil {
		return err
	}
	q, err := newQuotaServer(s.settings.Limiter.Quota, s.svc, s.ops.traceCounter(s.counters.lease), s.counters.back, s.stats, s.log)
	if err != nil {
		return err
	}
	s.quota = q

	if !s.settings.Config.ForceStart {
		select {
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}

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
	s.health.Set(ComponentSigterm, false)
	s.quota.stopStreams()
	s.net.shutdown()
	if err := served(errc, running); runErr == nil {
		runErr = err
	}
	return runErr
}

// watchBackendHealth mirrors the stores' own health into the service's
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION); it ends with ctx.
func (s *Server) watchBackendHealth(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		s.health.Set(ComponentBackend, s.counters.back.Healthy())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
