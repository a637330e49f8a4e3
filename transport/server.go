package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/transport/metrics"
	"github.com/sluicehq/sluice/transport/tlsreload"
	"github.com/sluicehq/sluice/transport/tracing"
	"github.com/sluicehq/sluice/transport/xds"
)

// ConfigSource produces configuration events until its context ends, then
// closes the channel. FileSource is one; the xDS client is another.
type ConfigSource interface {
	Run(ctx context.Context, out chan<- ConfigEvent) error
}

// Options assemble a Server. Only Settings is required.
type Options struct {
	Settings Settings
	Logger   *slog.Logger
	Stats    *stats.Store
	Clock    func() time.Time
	// ConfigSource overrides the one Settings.Config describes.
	ConfigSource ConfigSource
	// GRPCServerOptions are added to the gRPC server's (TLS credentials, interceptors).
	GRPCServerOptions []grpc.ServerOption
	// DebugEndpoints are extra debug paths.
	DebugEndpoints map[string]DebugEndpoint
	// StatsOutput receives the standard-output statistics sink (USE_STATSD=false); os.Stdout when nil.
	StatsOutput io.Writer
}

// Server is the rate limit service: engine, shards, backends and listeners.
type Server struct {
	o      Options
	s      Settings
	log    *slog.Logger
	errs   *errorLog // failed decisions, one line per interval and kind
	stats  *stats.Store
	svc    *engine.Service
	router *actors.Router
	back   *backends
	health *Health
	ghs    *health.Server

	grpc  *grpc.Server
	http  *http.Server
	debug *http.Server

	loadSuccess, loadError *stats.Counter
	runtimeStats           *runtimeStats // nil unless CONFIG_TYPE=FILE
	// shardDepth are the sluice.shard.<i>.queue_depth gauges, set from the
	// router at each statistics flush.
	shardDepth []*stats.Gauge

	mu    sync.Mutex
	addrs Addrs

	perMethod sync.Map // full gRPC method → *methodStats

	ops ops // statistics sink, TLS, xDS and tracing
}

// Addrs are the bound addresses, known once Run has started listening.
type Addrs struct{ GRPC, HTTP, Debug net.Addr }

// NewServer builds the backend (waiting for it to answer, as the reference
// does before opening any listener), the shards and the engine.
func NewServer(ctx context.Context, o Options) (*Server, error) {
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
	srv := &Server{o: o, s: s, log: o.Logger, stats: o.Stats,
		loadSuccess: o.Stats.Counter("ratelimit.service.config_load_success"),
		loadError:   o.Stats.Counter("ratelimit.service.config_load_error"),
	}
	srv.errs = newErrorLog(srv.log, s.Log.RepeatInterval)
	if s.Config.Type == "FILE" {
		// The reference's file runtime (goruntime) counts its loads under
		// the "runtime" scope.
		srv.runtimeStats = &runtimeStats{
			attempts:  o.Stats.Counter("runtime.load_attempts"),
			failures:  o.Stats.Counter("runtime.load_failures"),
			numValues: o.Stats.Gauge("runtime.num_values"),
		}
	}
	srv.ghs = health.NewServer()
	srv.health = NewHealth(srv.ghs, s.Config.HealthyWithConfig)
	if err := srv.buildOps(); err != nil {
		return nil, err
	}

	back, err := newBackends(ctx, s, o.Clock, o.Logger)
	if err != nil {
		return nil, err
	}
	srv.back = back
	metrics.RegisterRuntime(o.Stats)
	for scope, pool := range back.pools {
		metrics.RegisterPool(o.Stats, scope, func() metrics.PoolFigures {
			ps := pool.PoolStats()
			return metrics.PoolFigures{Active: ps.ActiveConns, Opened: ps.Dials, LocalCloses: ps.Closes}
		})
	}
	srv.traceBackends()
	srv.health.Set(ComponentBackend, true)

	shards := s.Limiter.Shards
	if shards == 0 && s.Backend.Type != "memory" {
		// Fewer shards make bigger batches and fewer round trips; a network
		// backend's latency hides the lost parallelism.
		shards = runtime.GOMAXPROCS(0)
	}
	router, err := actors.New(actors.Options{
		Shards:      shards,
		Backend:     back.main,
		PerSecond:   back.perSecond,
		MaxInFlight: maxInFlight(s.Limiter.MaxInFlight, back.conns, shards),
		CallTimeout: s.Limiter.BackendTimeout,
		// The reference's pipeline variables bound a shard's batches.
		Pipeline:          back.pipeline,
		PerSecondPipeline: back.perSecondPipeline,
		Logger:            o.Logger,
	})
	if err != nil {
		back.Close()
		return nil, err
	}
	srv.router = router
	for i := 0; i < router.Shards(); i++ {
		srv.shardDepth = append(srv.shardDepth, o.Stats.Gauge(fmt.Sprintf("sluice.shard.%d.queue_depth", i)))
	}

	eo := engine.DefaultOptions()
	eo.Counter = srv.traceCounter(router)
	eo.Stats = o.Stats
	eo.Clock = o.Clock
	eo.NearLimitRatio = s.Limiter.NearLimitRatio
	eo.CacheKeyPrefix = s.Limiter.CacheKeyPrefix
	eo.ExpirationJitterMax = s.Limiter.ExpirationJitterMax
	eo.ShadowMode = s.Limiter.ShadowMode
	eo.QuotaMode = s.Limiter.QuotaMode
	eo.DynamicMetadata = s.Limiter.DynamicMetadata
	eo.Headers = s.Limiter.Headers
	eo.StopIncrementOnLimit = s.Limiter.StopIncrementOnLimit
	eo.KeyValidator = back.validator
	eo.Timeout = s.Limiter.BackendTimeout
	if s.Limiter.LocalCacheSizeBytes > 0 {
		eo.LocalCache = actors.NewOverLimitCache(s.Limiter.LocalCacheSizeBytes, o.Clock, o.Stats)
	}
	svc, err := engine.NewService(eo)
	if err != nil {
		router.Close()
		back.Close()
		return nil, err
	}
	srv.svc = svc
	if o.ConfigSource == nil && s.Config.Type == "FILE" {
		srv.o.ConfigSource = NewFileSource(s.Config, o.Logger)
	}
	if srv.o.ConfigSource == nil && srv.ops.xds != nil {
		srv.o.ConfigSource = xdsConfigSource{srv.ops.xds}
	}
	if srv.o.ConfigSource == nil {
		router.Close()
		back.Close()
		return nil, fmt.Errorf("no configuration source for CONFIG_TYPE=%s", s.Config.Type)
	}
	return srv, nil
}

// Engine is the decision service (for in-process users such as the OData API).
func (s *Server) Engine() *engine.Service { return s.svc }

// Health is the service health.
func (s *Server) Health() *Health { return s.health }

// Stats is the statistics store.
func (s *Server) Stats() *stats.Store { return s.stats }

// Addrs are the bound addresses (zero until Run listens).
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs
}

// DumpConfig implements ConfigDumper.
func (s *Server) DumpConfig() string {
	if c := s.svc.Config(); c != nil {
		return c.Dump()
	}
	return ""
}

// runtimeStats are the reference's goruntime loader figures: every reload
// of the rule files is an attempt; num_values is the number of files read.
type runtimeStats struct {
	attempts, failures *stats.Counter
	numValues          *stats.Gauge
}

// apply loads one configuration event; a failure keeps the previous config.
func (s *Server) apply(ev ConfigEvent) {
	err := s.load(ev)
	if ev.Applied != nil {
		select {
		case ev.Applied <- err:
		default: // a source that asked must leave room; never block the loader
		}
	}
}

func (s *Server) load(ev ConfigEvent) error {
	if rs := s.runtimeStats; rs != nil {
		rs.attempts.Inc()
		if ev.Err != nil {
			rs.failures.Inc()
		} else {
			rs.numValues.Set(int64(len(ev.Files)))
		}
	}
	cfg, err := (*engine.Config)(nil), ev.Err
	if err == nil {
		cfg, err = s.svc.LoadConfig(ev.Files, s.s.Config.MergeDomains)
	}
	if err != nil {
		s.loadError.Inc()
		s.log.Error("Error loading new configuration: " + err.Error())
		return err
	}
	s.svc.SetConfig(cfg)
	s.loadSuccess.Inc()
	s.health.Set(ComponentConfig, len(cfg.Domains()) > 0)
	s.log.Info("Successfully loaded new configuration")
	return nil
}

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
		if err := s.o.ConfigSource.Run(cfgCtx, events); err != nil {
			s.log.Error("configuration source stopped", "error", err)
		}
	}()
	if len(s.back.health) > 0 {
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
			s.apply(ev)
			once()
		}
	}()
	defer func() {
		stopConfig()
		bg.Wait()
		s.router.Close()
		s.back.Close()
		s.errs.close()
		s.closeOps() // last, so the final statistics flush sees everything
	}()
	if err := s.startOps(cfgCtx, &bg); err != nil {
		return err
	}

	if !s.s.Config.ForceStart {
		select {
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}

	lns, err := s.listen()
	if err != nil {
		return err
	}
	s.grpc = s.newGRPCServer()
	s.http = s.s.Listen.HTTPTimeouts.Server(s.traceHTTP(newHTTPHandler(s.decider(), s.health, s.log, s.errs)))
	s.debug = s.s.Listen.HTTPTimeouts.Server(newDebugHandler(s, s.o.DebugEndpoints))

	errc := make(chan error, 3)
	go func() { errc <- s.grpc.Serve(lns[0]) }()
	go func() { errc <- s.http.Serve(lns[1]) }()
	go func() { errc <- s.debug.Serve(lns[2]) }()
	if ready != nil {
		close(ready)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		runErr = fmt.Errorf("server stopped: %w", runErr)
	}
	s.health.Set(ComponentSigterm, false)
	s.shutdown()
	for i := 0; i < 3; i++ {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

// watchBackendHealth mirrors the stores' own health into the service's
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION); it ends with ctx.
func (s *Server) watchBackendHealth(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		s.health.Set(ComponentBackend, s.back.Healthy())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// shutdown stops accepting, lets in-flight requests finish (bounded), and
// closes the listeners.
func (s *Server) shutdown() {
	const grace = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	_ = s.http.Shutdown(ctx)
	_ = s.debug.Shutdown(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// defaultInFlight caps the default calls in flight per shard. Measured on
// the 2-core bench (one Redis, 2 shards): at 200 callers 1 call per shard
// gives 0.05 round trips per decision, 2 give 0.10, 5 (the whole pool) 0.13
// with 20% more CPU per decision; at 10 callers more calls lower p50 and p99.
// Two keep a decision at low load from waiting behind a call it is not part
// of, while the batches at high load stay within the 0.1 round-trip budget.
const defaultInFlight = 2

// maxInFlight is how many backend calls one shard may have outstanding: the
// configured value, or the connection pool shared out among the shards (so
// calls never queue for a connection), at most defaultInFlight.
func maxInFlight(configured, conns, shards int) int {
	if configured > 0 {
		return configured
	}
	if conns <= 0 || shards <= 0 {
		return 1
	}
	return min(defaultInFlight, max(1, conns/shards))
}

func (s *Server) newGRPCServer() *grpc.Server {
	l := s.s.Listen
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
		grpc.ChainUnaryInterceptor(s.statsInterceptor),
		// RLS messages are coded by hand (wire.go); the rest by protobuf.
		grpc.ForceServerCodecV2(newRLSCodec()),
	}
	opts = append(opts, s.o.GRPCServerOptions...)
	g := grpc.NewServer(opts...)
	rls := newRLSServer(s.decider(), s.log, s.errs)
	g.RegisterService(rls.serviceDesc(), rls)
	healthpb.RegisterHealthServer(g, s.ghs)
	return g
}

// statsInterceptor counts ratelimit_server.<Method>.total_requests and
// .response_time, as the reference's gRPC interceptor.
func (s *Server) statsInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	ms := s.methodStats(info.FullMethod)
	ms.total.Inc()
	ms.time.Record(time.Since(start))
	return resp, err
}

type methodStats struct {
	total *stats.Counter
	time  *stats.Timer
}

// methodStats resolves a gRPC method's stats once (the names never change).
func (s *Server) methodStats(full string) *methodStats {
	if v, ok := s.perMethod.Load(full); ok {
		return v.(*methodStats)
	}
	method := full
	if i := lastSlash(method); i >= 0 {
		method = method[i+1:]
	}
	ms := &methodStats{
		total: s.stats.Counter("ratelimit_server." + method + ".total_requests"),
		time:  s.stats.Timer("ratelimit_server." + method + ".response_time"),
	}
	v, _ := s.perMethod.LoadOrStore(full, ms)
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
func (s *Server) listen() ([3]net.Listener, error) {
	var lns [3]net.Listener
	l := s.s.Listen
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
		lns[0], err = listenReusePort(l.GRPCAddr())
	}
	if err == nil {
		lns[1], err = listenReusePort(l.HTTPAddr())
	}
	if err == nil {
		lns[2], err = listenReusePort(l.DebugAddr())
	}
	if err != nil {
		closeAll()
		return lns, fmt.Errorf("listening: %w", err)
	}
	s.mu.Lock()
	s.addrs = Addrs{GRPC: lns[0].Addr(), HTTP: lns[1].Addr(), Debug: lns[2].Addr()}
	s.mu.Unlock()
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

// ops are the operations features around the decision path. They are built
// by NewServer without starting anything, started by Run, and closed when Run
// returns.
type ops struct {
	metrics *metrics.Reporter
	tls     *tlsreload.Reloader // nil without GRPC_SERVER_USE_TLS
	xds     *xds.Source         // nil unless CONFIG_TYPE=GRPC_XDS_SOTW
	tracing *tracing.Tracing    // nil without TRACING_ENABLED
}

func (s *Server) buildOps() error {
	var err error
	s.ops.metrics, err = metrics.New(s.s.Stats, s.stats, metrics.Options{Logger: s.log, Stdout: s.o.StatsOutput,
		Refresh: s.publishShardDepth, HTTPServer: s.s.Listen.HTTPTimeouts.Server})
	if err != nil {
		return fmt.Errorf("statistics: %w", err)
	}
	if s.s.TLS.Enabled {
		if s.ops.tls, err = tlsreload.New(s.s.TLS, tlsreload.Options{Logger: s.log}); err != nil {
			return fmt.Errorf("gRPC server TLS: %w", err)
		}
		opts := append([]grpc.ServerOption{}, s.o.GRPCServerOptions...)
		s.o.GRPCServerOptions = append(opts, grpc.Creds(credentials.NewTLS(s.ops.tls.TLSConfig())))
	}
	if s.s.Tracing.Enabled {
		if s.ops.tracing, err = tracing.New(s.s.Tracing, tracing.Options{Logger: s.log}); err != nil {
			return err
		}
		opts := append([]grpc.ServerOption{}, s.o.GRPCServerOptions...)
		s.o.GRPCServerOptions = append(opts, s.ops.tracing.GRPCServerOption())
	}
	if s.o.ConfigSource == nil && s.s.Config.Type == "GRPC_XDS_SOTW" {
		// Validated before the ACK with the loader apply uses, on a private
		// stats store so a rejected rule set leaves no counters behind.
		validate := func(files []engine.ConfigFile) error {
			_, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: s.s.Config.MergeDomains})
			return err
		}
		if s.ops.xds, err = xds.New(s.s.XDS, xds.Options{Logger: s.log, Validate: validate}); err != nil {
			return fmt.Errorf("xDS configuration client: %w", err)
		}
	}
	return nil
}

// startOps starts what runs beside the listeners; goroutines that need to
// stop before the shards do join bg and end with ctx.
func (s *Server) startOps(ctx context.Context, bg *sync.WaitGroup) error {
	if s.ops.tracing != nil {
		if err := s.ops.tracing.Start(ctx); err != nil {
			return err
		}
	}
	if s.ops.tls != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := s.ops.tls.Watch(ctx); err != nil {
				s.log.Error("gRPC server TLS files are not watched; certificates will not reload", "error", err)
			}
		}()
	}
	return s.ops.metrics.Start()
}

func (s *Server) closeOps() {
	if s.ops.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.ops.tracing.Shutdown(ctx); err != nil {
			s.log.Warn("flushing traces", "error", err)
		}
		cancel()
	}
	if err := s.ops.metrics.Close(); err != nil {
		s.log.Warn("closing the statistics sink", "error", err)
	}
}

// publishShardDepth sets each shard's queue depth gauge. The reporter is built
// before the router, but flushes only after Run has started, when shardDepth
// is complete.
func (s *Server) publishShardDepth() {
	for i, g := range s.shardDepth {
		g.Set(int64(s.router.Pending(i)))
	}
}

// MetricsAddr is the pull metrics listener's address (USE_PROMETHEUS), or nil.
func (s *Server) MetricsAddr() net.Addr { return s.ops.metrics.Addr() }

// xdsConfigSource turns the xDS client's deliveries into configuration events.
// A delivery returns only once the server has applied it, so the client's ACK
// means "in use", not "received": a management server (or a test) that saw
// the ACK sees the new rules enforced.
type xdsConfigSource struct{ src *xds.Source }

func (x xdsConfigSource) Run(ctx context.Context, out chan<- ConfigEvent) error {
	defer close(out)
	return x.src.Run(ctx, func(files []engine.ConfigFile, err error) bool {
		applied := make(chan error, 1)
		select {
		case out <- ConfigEvent{Files: files, Err: err, Applied: applied}:
		case <-ctx.Done():
			return false
		}
		select {
		case <-applied:
			return true
		case <-ctx.Done():
			return false
		}
	})
}

// decider is the decision call of the gRPC and HTTP servers, traced when
// tracing is on.
func (s *Server) decider() Decider {
	if s.ops.tracing == nil {
		return s.svc
	}
	return s.ops.tracing.Decider(s.svc)
}

func (s *Server) traceHTTP(h http.Handler) http.Handler {
	if s.ops.tracing == nil {
		return h
	}
	return s.ops.tracing.HTTPHandler(h)
}

func (s *Server) traceCounter(c engine.Counter) engine.Counter {
	if s.ops.tracing == nil {
		return c
	}
	return s.ops.tracing.Counter(c, s.s.Backend.Type)
}

// traceBackends spans every backend call the shards make.
func (s *Server) traceBackends() {
	t := s.ops.tracing
	if t == nil {
		return
	}
	kind := s.s.Backend.Type
	if main := s.back.main; main != nil {
		s.back.main = func(i int) engine.Backend { return t.Backend(main(i), kind) }
	}
	if sec := s.back.perSecond; sec != nil {
		s.back.perSecond = func(i int) engine.Backend { return t.Backend(sec(i), kind) }
	}
}
