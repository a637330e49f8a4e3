package odata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/netx"
)

// Server serves the API. Create it with NewServer, run it with Serve, stop
// it with Shutdown.
type Server struct {
	opts    Options
	store   Store
	keys    KeyStore
	limiter RateLimiter
	log     *slog.Logger
	origins map[string]bool
	turns   *turns
	access  *accessLog // nil without Options.AccessLog
	metrics *Metrics   // nil without Options.Metrics
	// metricsHTTP serves Options.MetricsPath; nil without it.
	metricsHTTP fasthttp.RequestHandler
	tracer      trace.Tracer // nil without Options.TracerProvider
	prop        propagation.TextMapPropagator
	http        *fasthttp.Server
	// csdlXML and csdlJSON are the $metadata documents, built once.
	csdlXML, csdlJSON []byte

	keyCache    *keyCache
	keyFails    *failThrottle
	originSlots *slots
	browsers    *recent // browser callers with counters of their own
	// slots are held by requests doing database work; nil: no cap.
	slots       *dataSlots
	limiterDown atomic.Bool // the limiter's last answer was an error
	// notReady, when set, is why every request is answered 503 (the
	// store is still being filled: SetUnavailable).
	notReady atomic.Pointer[string]

	// base is canceled by a forced shutdown: it ends database work still
	// running for responses that did not finish in time.
	base   context.Context
	cancel context.CancelFunc

	streams sync.WaitGroup // response bodies being written
	connsMu sync.Mutex
	conns   map[*stallConn]struct{}
	closed  bool
	ln      net.Listener // the listener Serve accepts from, closed by a drain

	draining atomic.Bool // answers carry Connection: close (drain.go)
}

// NewServer checks opts and builds a server over store. keys checks API
// keys; limiter applies the per-second rule (nil: none, only the
// sequential rule of Options applies).
func NewServer(opts Options, store Store, keys KeyStore, limiter RateLimiter) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if store == nil || keys == nil {
		return nil, errors.New("odata: a store and a key store are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, store: store, keys: keys, limiter: limiter, log: log,
		origins: map[string]bool{}, turns: newTurns(opts), conns: map[*stallConn]struct{}{},
		csdlXML: metadataXML(), csdlJSON: metadataJSON(),
		access:      newAccessLog(opts.AccessLog, opts.AccessLogPerSecond, nil),
		keyCache:    newKeyCache(opts.KeyCacheTTL, time.Now),
		keyFails:    newFailThrottle(opts.KeyFailures, opts.KeyFailureWindow, time.Now),
		originSlots: newSlots(opts.OriginMaxInFlight),
		browsers:    newRecent(maxTracked, browserIdle)}
	if opts.Metrics != nil {
		s.metrics = opts.Metrics
		s.metrics.srv.Store(s)
		if opts.MetricsPath != "" {
			reg := prometheus.NewRegistry()
			if err := reg.Register(opts.Metrics); err != nil {
				return nil, fmt.Errorf("odata: metrics: %w", err)
			}
			s.metricsHTTP = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		}
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(instrumentation)
		s.prop = opts.Propagator
	}
	if n := queryCap(opts.MaxQueries, store); n > 0 {
		s.slots = newDataSlots(n, opts.StallPreempt)
	}
	for _, o := range opts.CORSOrigins {
		s.origins[strings.ToLower(o)] = true
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.http = &fasthttp.Server{
		Handler:                      s.handleDraining,
		ConnState:                    s.trackState,
		Name:                         "sluice",
		ReadTimeout:                  30 * time.Second,
		IdleTimeout:                  90 * time.Second,
		ReadBufferSize:               64 << 10, // long $filter values arrive in the request line
		MaxRequestBodySize:           4 << 10,  // only GET/HEAD/OPTIONS are served
		NoDefaultContentType:         true,
		NoDefaultDate:                false,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// A connection a client or a preempted slot closed mid-write is
		// routine here; fasthttp's own logger would print each to stderr.
		Logger: debugLogger{log},
	}
	return s, nil
}

// browserIdle is how long a browser caller unseen keeps its place among
// the tracked ones: longer than its rate limit counter lives (a token
// bucket of 4 refills in 2 s), so evicting it forgets nothing the limit
// still needs.
const browserIdle = 10 * time.Second

// queryCap is the effective MaxQueries: derived from the store's pool when
// 0, none when negative.
func queryCap(configured int, store Store) int {
	if configured != 0 {
		return configured
	}
	if p, ok := store.(interface{ MaxConns() int }); ok {
		return max(1, p.MaxConns()-KeyConns)
	}
	return -1
}

// MaxQueries is the cap on concurrent data queries in effect (negative:
// none).
func (s *Server) MaxQueries() int {
	if s.slots == nil {
		return -1
	}
	return s.slots.size
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	limit := s.opts.MaxConnections
	if limit == 0 {
		limit = netx.ShareOfFiles(ODataFileShare)
	}
	guarded, err := netx.Listen(ln, netx.Config{Max: max(0, limit), Refuse: netx.RefuseHTTP, Name: "odata", Log: s.log})
	if err != nil {
		return err
	}
	sl := &onceCloser{Listener: &stallListener{Listener: guarded, s: s}}
	s.connsMu.Lock()
	if s.closed {
		s.connsMu.Unlock()
		_ = sl.Close()
		return nil
	}
	s.ln = sl
	s.connsMu.Unlock()
	err = s.http.Serve(sl)
	if err != nil && s.isClosed() {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for responses in progress
// to finish, closing keep-alive connections only once they have been idle
// for a second (drain.go), so that no request a client has sent is lost.
// When ctx ends first, their database work is canceled and their
// connections are closed; Shutdown returns once every response has ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.connsMu.Lock()
	s.closed = true
	s.connsMu.Unlock()
	// Requests waiting for their turn are answered now (503, Retry-After,
	// Connection: close) rather than at the end of their wait.
	s.turns.close()
	err := s.drain(ctx)
	if err != nil {
		s.cancel()
		s.connsMu.Lock()
		for c := range s.conns {
			c.Conn.Close()
		}
		s.connsMu.Unlock()
	}
	s.streams.Wait()
	s.cancel()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("odata: shutdown cut responses short: %w", err)
	}
	return err
}

func (s *Server) isClosed() bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return s.closed
}

// debugLogger passes fasthttp's messages to the server's log at debug level.
type debugLogger struct{ l *slog.Logger }

func (d debugLogger) Printf(format string, args ...any) {
	d.l.Debug("odata: http: " + fmt.Sprintf(format, args...))
}
