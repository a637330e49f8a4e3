package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport/tracing"
)

// odataConfig is the command-line configuration of the OData API, shared by
// `sluice odata` and `sluice serve` (see odataFlags).
type odataConfig struct {
	db          string
	opts        odata.Options
	cors        string
	proxies     string
	rps         uint
	burst       uint
	rateService string
	fallback    string
	demoRows    int
	drain       time.Duration
	accessLog   bool
	// metricsPath is where the OData port serves its metrics when no pull
	// metrics port does ("": nowhere).
	metricsPath string
	// tracing are the TRACING_* settings (the rate limit service's).
	tracing tracing.Settings
}

// parseODataFlags parses the flags of a command that serves the OData API
// (odata, serve).
func parseODataFlags(command string, args []string) (*odataConfig, error) {
	env := [][]envVar{storeEnv}
	synopsis := "odata [-db DSN] [flags]   (the OData API alone)"
	if command == "serve" {
		env = [][]envVar{rateLimitEnv, storeEnv}
		synopsis = "serve [-db DSN] [flags]   (the rate limit service, configured by the environment, and the OData API, by flags)"
	}
	fs := newFlagSet(command, synopsis, env...)
	c := odataFlags(fs)
	if err := parseWithDB(fs, args, &c.db); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, usagef("%s takes no arguments, got %q", command, fs.Args())
	}
	return c, nil
}

// odataFlags registers the OData API's flags on fs, with the documented
// defaults.
func odataFlags(fs *flag.FlagSet) *odataConfig {
	c := &odataConfig{opts: odata.DefaultOptions()}
	fs.StringVar(&c.db, "db", defaultODataDB, `OData store: "postgres://...", libpq keywords ("host=... dbname=...") or "sqlite:/path" (an empty SQLite store gets demo data; or $SLUICE_DB, or the file $SLUICE_DB_FILE)`)
	fs.StringVar(&c.opts.Addr, "odata-addr", c.opts.Addr, "OData API listen address")
	fs.StringVar(&c.opts.Root, "odata-root", c.opts.Root, "path root of the collections")
	fs.StringVar(&c.opts.PublicURL, "public-url", "", "scheme://host[:port] for next links (default: the request's Host)")
	fs.Int64Var(&c.opts.MaxPageBytes, "max-page-bytes", c.opts.MaxPageBytes, "413 for a page larger than this")
	fs.DurationVar(&c.opts.QueryTimeout, "query-timeout", c.opts.QueryTimeout, "504 for a query slower than this")
	fs.BoolVar(&c.opts.Gzip, "gzip", c.opts.Gzip, "answer gzip to clients that accept it")
	fs.BoolVar(&c.opts.Brotli, "brotli", c.opts.Brotli, "answer br to clients that offer it beside another coding (never to br alone; off: the official clients send br without always decoding it)")
	fs.BoolVar(&c.opts.Zstd, "zstd", c.opts.Zstd, "answer zstd to clients that accept it")
	fs.BoolVar(&c.opts.Sequential, "sequential", c.opts.Sequential, "one request in flight per key: the next waits for its turn")
	fs.DurationVar(&c.opts.PaceWait, "pace-wait", c.opts.PaceWait, "longest a request waits for its key's turn and rate before 429 (0: 429 at once)")
	fs.IntVar(&c.opts.PaceQueue, "pace-queue", c.opts.PaceQueue, "requests of one key that may wait at once; one more gets 429")
	fs.IntVar(&c.opts.PaceQueueTotal, "pace-queue-total", c.opts.PaceQueueTotal, "requests of all keys that may wait at once; one more gets 429 (anonymous browser callers have room of their own, half as many)")
	fs.StringVar(&c.proxies, "trusted-proxies", "", "comma-separated CIDRs or addresses of proxies whose Forwarded / X-Forwarded-* headers are believed (default: none)")
	fs.StringVar(&c.opts.ForwardedHeader, "forwarded-header", "X-Forwarded-For", "the one header a trusted proxy's client chain is read from (its right-most hop that is no trusted proxy is the client): X-Forwarded-For, Forwarded (RFC 7239; then its proto= and host= make the links) or another address list; have the proxy strip the others")
	fs.StringVar(&c.cors, "cors-origins", "", "comma-separated browser origins allowed without a key")
	fs.UintVar(&c.rps, "requests-per-second", 2, "requests per second per key, on average (in-process rate limit engine: a token bucket)")
	fs.UintVar(&c.burst, "burst", odata.DefaultBurst, "requests a key may make at once (the token bucket's capacity)")
	fs.StringVar(&c.rateService, "rate-limit-service", "", "host:port of a gRPC rate limit service to use instead of the in-process engine (domain odata, descriptor api_key)")
	fs.StringVar(&c.fallback, "rate-limit-fallback", "local", "when the -rate-limit-service fails: local (the in-process limit of -requests-per-second and -burst applies), deny (503) or allow (no limit)")
	fs.IntVar(&c.opts.FilterBudget, "filter-budget", c.opts.FilterBudget, "400 for a $filter costing more than this (0: no budget; see docs/odata.md)")
	fs.IntVar(&c.opts.MaxQueries, "max-queries", c.opts.MaxQueries, "503 beyond this many requests doing database work at once (0: the pool size minus 2, kept for key checks; -1: no cap)")
	fs.DurationVar(&c.opts.SlotWait, "slot-wait", c.opts.SlotWait, "how long a request waits for a data query slot when -max-queries are running (then 503)")
	fs.DurationVar(&c.opts.StallPreempt, "stall-preempt", c.opts.StallPreempt, "a response whose write has waited this long on its client gives its data slot to a waiting request (its connection is closed)")
	fs.DurationVar(&c.opts.StreamTimeout, "stream-timeout", c.opts.StreamTimeout, "longest response body, however slowly the client reads")
	fs.DurationVar(&c.opts.KeyCacheTTL, "key-cache-ttl", c.opts.KeyCacheTTL, "how long a checked API key is trusted (a revocation takes effect within it; 0: no cache)")
	fs.IntVar(&c.opts.KeyFailures, "key-failures", c.opts.KeyFailures, "failed key checks per client network (IPv4 /24, IPv6 /64) per -key-failure-window before its key checks get 429 (0: no throttle)")
	fs.DurationVar(&c.opts.KeyFailureWindow, "key-failure-window", c.opts.KeyFailureWindow, "window of -key-failures")
	fs.IntVar(&c.opts.OriginMaxInFlight, "origin-max-in-flight", c.opts.OriginMaxInFlight, "requests in flight per browser origin (no key), all client addresses together (0: no cap)")
	fs.DurationVar(&c.drain, "odata-shutdown-timeout", 10*time.Second, "on SIGTERM, how long OData responses in progress may take to finish before they are cut")
	fs.IntVar(&c.demoRows, "demo-rows", odata.DemoRows, "observations generated into an empty store on first start")
	fs.BoolVar(&c.accessLog, "access-log", true, "one line per OData request on stderr (text or JSON as LOG_FORMAT)")
	fs.StringVar(&c.metricsPath, "odata-metrics-path", "", "path of the public OData port at which to serve its Prometheus metrics without a key, when the pull metrics port (USE_PROMETHEUS) does not (default \"\": not served there)")
	fs.IntVar(&c.opts.MaxConnections, "odata-max-connections", c.opts.MaxConnections, "connections open at once on the OData port; one more is answered 503 and closed (0: 40 % of the open-file limit; -1: no cap)")
	fs.IntVar(&c.opts.AccessLogPerSecond, "access-log-per-second", c.opts.AccessLogPerSecond, "most access-log lines per second; the lines over it are counted, not written")
	return c
}

// odataService is a running OData API.
type odataService struct {
	db      *sqlstore.DB
	srv     *odata.Server
	ln      net.Listener
	limiter interface{ Close() error }
	extra   interface{ Close() error } // the fallback limiter, if any
	tracing *tracing.Tracing           // nil without TRACING_ENABLED
	demoKey string                     // set when demo data and key were prepared
	// generate fills an empty store with demo data; run runs it in the
	// background while the API answers 503 (nil: nothing to generate).
	generate func(ctx context.Context) error
}

// startOData opens the store (generating demo data into an empty one), builds
// the limiter and the server, and listens. It prints progress to stderr.
//
// The settings are checked before anything is opened; from the store on,
// what was opened is closed again if a later step fails.
func startOData(ctx context.Context, c *odataConfig, log *slog.Logger) (_ *odataService, err error) {
	if err := c.complete(log); err != nil {
		return nil, err
	}
	// Every read statement is bounded on the database too, by the same
	// budget as the request (row streams by the body's).
	db, err := openODataStore(ctx, c.db, sqlstore.Config{StatementTimeout: c.opts.QueryTimeout, StreamTimeout: c.opts.StreamTimeout})
	if err != nil {
		return nil, err
	}
	s := &odataService{db: db}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := s.prepareDemo(ctx, c); err != nil {
		return nil, err
	}
	if s.generate != nil {
		// Meanwhile the API answers 503: its metrics say nothing yet.
		defer func() {
			if err == nil {
				s.srv.SetUnavailable(fmt.Sprintf("demo data is being generated (%d observations, about a minute on a small machine); retry in a few seconds", c.demoRows))
			}
		}()
	}
	if c.tracing.Enabled {
		if s.tracing, err = tracing.New(c.tracing, tracing.Options{Logger: log}); err != nil {
			return nil, err
		}
		if err := s.tracing.Start(ctx); err != nil {
			return nil, err
		}
		c.opts.TracerProvider, c.opts.Propagator = s.tracing.TracerProvider(), s.tracing.Propagator()
	}
	lim, err := s.newLimiter(c, log)
	if err != nil {
		return nil, err
	}
	if s.srv, err = odata.NewServer(c.opts, db, db, lim); err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", c.opts.Addr); err != nil {
		return nil, fmt.Errorf("odata: listen on %s: %w", c.opts.Addr, err)
	}
	return s, nil
}

// complete turns the flag values into server options (origins, proxies,
// loggers) and checks them all, so that a bad setting fails before the
// store is opened.
func (c *odataConfig) complete(log *slog.Logger) error {
	if c.cors != "" {
		for _, o := range strings.Split(c.cors, ",") {
			if o = strings.TrimSpace(o); o != "" {
				c.opts.CORSOrigins = append(c.opts.CORSOrigins, o)
			}
		}
	}
	if c.proxies != "" {
		for _, p := range strings.Split(c.proxies, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			prefix, err := parsePrefix(p)
			if err != nil {
				return fmt.Errorf("-trusted-proxies: %q is neither a CIDR (10.0.0.0/8) nor an address: %w", p, err)
			}
			c.opts.TrustedProxies = append(c.opts.TrustedProxies, prefix)
		}
	}
	c.opts.Logger = log
	if c.opts.Metrics != nil {
		c.opts.MetricsPath = c.metricsPath
	}
	if c.accessLog {
		// Its own logger at info level: the access log is not silenced by
		// LOG_LEVEL=warn, only by -access-log=false.
		al, err := server.NewLogger(os.Stderr, settings.LogSettings{Level: "info", Format: os.Getenv("LOG_FORMAT")})
		if err != nil {
			return err
		}
		c.opts.AccessLog = al
	}
	if err := c.opts.Validate(); err != nil {
		return err
	}
	if c.drain <= 0 {
		return errors.New("-odata-shutdown-timeout must be positive")
	}
	switch c.fallback {
	case "local", "deny", "allow":
	default:
		return fmt.Errorf("-rate-limit-fallback must be local, deny or allow, got %q", c.fallback)
	}
	if c.rateService != "" && c.fallback == "local" && c.rps == 0 {
		return errors.New("-rate-limit-fallback local needs -requests-per-second above 0 (the limit that applies while the service is down)")
	}
	return nil
}

// prepareDemo generates demo data into an empty store, and gives the
// embedded demo store a key to print.
func (s *odataService) prepareDemo(ctx context.Context, c *odataConfig) error {
	empty, err := s.db.Empty(ctx)
	if err != nil {
		return err
	}
	if empty {
		// Generated in the background (run): every port answers at once,
		// the OData API with 503 and a message until the data is there.
		s.generate = func(ctx context.Context) error {
			fmt.Fprintf(os.Stderr, "The OData store %s is empty: generating %d demo observations in the background; the API answers 503 until they are in.\n", redact.String(c.db), c.demoRows)
			bar := newProgressBar(os.Stderr, "generate", "rows")
			key, err := odata.EnsureDemo(ctx, s.db, c.demoRows, bar.update)
			bar.finish()
			s.demoKey = key
			return err
		}
		return nil
	}
	if c.db == defaultODataDB {
		// The embedded demo store: a fresh key each start, so the printed
		// curl lines work (keys are stored hashed and cannot be shown again).
		s.demoKey, err = odata.EnsureDemo(ctx, s.db, 0, nil)
	}
	return err
}

// newLimiter builds the rate limiter the flags ask for: the remote service
// (with its fallback), the in-process engine, or none when
// -requests-per-second is 0. What it opens is kept on s, so that s.close
// closes it also when a later step fails.
func (s *odataService) newLimiter(c *odataConfig, log *slog.Logger) (odata.RateLimiter, error) {
	local := odata.LocalLimiterOptions{RequestsPerSecond: uint32(c.rps), Burst: uint32(c.burst)}
	switch {
	case c.rateService != "":
		r, err := odata.NewRemoteLimiter(odata.RemoteLimiterOptions{Target: c.rateService, Timeout: time.Second, DialOptions: s.limiterDialOptions()})
		if err != nil {
			return nil, err
		}
		s.limiter = r
		switch c.fallback {
		case "local":
			l, err := odata.NewLocalLimiter(local)
			if err != nil {
				return nil, err
			}
			s.extra = l
			return odata.NewFallbackLimiter(r, l, log), nil
		case "deny":
			c.opts.FailOpen = false
		case "allow":
			c.opts.FailOpen = true
		}
		return r, nil
	case c.rps > 0:
		l, err := odata.NewLocalLimiter(local)
		if err != nil {
			return nil, err
		}
		s.limiter = l
		return l, nil
	}
	return nil, nil
}

// limiterDialOptions are the remote rate limit service's connection
// options: plaintext, and with tracing on, the request's trace carried to
// the service, so that a slow decision can be followed into it.
func (s *odataService) limiterDialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if s.tracing != nil {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(s.tracing.TracerProvider()), otelgrpc.WithPropagators(s.tracing.Propagator()))))
	}
	return opts
}

// run serves until ctx ends, then shuts down (giving responses in progress
// drain to finish) and closes the store. A shutdown that had to cut
// responses at the deadline is still the clean end that was asked for: it
// is logged, and run returns nil (exit status 0). ready is called once the
// API answers with data: at once, or when the demo data is generated.
// Failing to generate it stops the API.
func (s *odataService) run(ctx context.Context, drain time.Duration, log *slog.Logger, ready func()) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	gen, stopGen := s.startGenerate(ctx)
	defer stopGen()
	if gen == nil {
		ready()
	}
	var err error
	for done := false; !done; {
		select {
		case err = <-errc:
			done = true
		case gerr := <-gen:
			gen = nil
			if gerr == nil {
				s.srv.SetUnavailable("")
				ready()
				continue
			}
			err = fmt.Errorf("odata: %w", gerr)
			s.shutdown(drain, log)
			<-errc
			done = true
		case <-ctx.Done():
			s.shutdown(drain, log)
			err = <-errc
			done = true
		}
	}
	stopGen()
	s.close()
	return err
}

// startGenerate runs s.generate in the background; its result comes on the
// channel (nil when there is nothing to generate). stop ends the
// generation and waits for it.
func (s *odataService) startGenerate(ctx context.Context) (<-chan error, func()) {
	if s.generate == nil {
		return nil, func() {}
	}
	gctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res <- s.generate(gctx)
	}()
	return res, func() { cancel(); <-finished }
}

// shutdown stops the server, giving responses in progress drain to finish.
func (s *odataService) shutdown(drain time.Duration, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	serr := s.srv.Shutdown(sctx)
	cancel()
	if serr != nil {
		log.Warn("odata: responses still streaming at the shutdown deadline were cut", "deadline", drain, "err", serr)
	}
}

func (s *odataService) close() {
	if s.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.tracing.Shutdown(ctx)
		cancel()
	}
	if s.limiter != nil {
		s.limiter.Close()
	}
	if s.extra != nil {
		s.extra.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
}

// printTryLines shows how to call the API. With a demo key it prints that
// key and curl lines using it; on any other store no key can be shown (they
// are stored hashed), so it says how to create one and the curl lines read
// it from $KEY.
func (s *odataService) printTryLines(w io.Writer, root, db string) {
	addr := localAddr(s.ln.Addr().String())
	base := "http://" + addr + root
	fmt.Fprintf(w, "\nOData API   %s   (/Metadata, /Locations, /Observations, /Records)\n", base)
	key := "'" + s.demoKey + "'"
	if s.demoKey != "" {
		fmt.Fprintf(w, "Demo API key: %s\n", s.demoKey)
	} else {
		key = `"$KEY"`
		fmt.Fprintf(w, "Create an API key (its secret is printed once) and keep it in KEY:\n  KEY=$(%s keys add -db '%s' NAME | tail -n 1)\n", selfCommand(os.Args[0]), redactDSN(db))
	}
	fmt.Fprintf(w, `
Try:
  curl -s -H x-api-key:%[1]s '%[2]s/Metadata?$top=1'
  curl -s -H x-api-key:%[1]s '%[2]s/Observations?$top=3&$filter=CharacteristicName%%20eq%%20%%27pH%%27'
  curl -s -H x-api-key:%[1]s '%[2]s/Records?$count=true&$filter=CharacteristicName%%20eq%%20%%27Titanium%%27'
  curl -s -i -H x-api-key:%[1]s '%[2]s/Locations?$select=Id,Name&$top=2'    (see the Link header)
`, key, base)
}

// keywordPassword is the password of libpq's keyword form, quoted or not.
var keywordPassword = regexp.MustCompile(`((?:^|\s)password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// selfCommand is how a banner names this binary so that its lines run as
// printed: the path it was started by (bin/sluice under make run), or
// "sluice" when it was found on the PATH.
func selfCommand(arg0 string) string {
	if !strings.Contains(arg0, "/") {
		return "sluice"
	}
	if strings.ContainsAny(arg0, " '\"$`\\") {
		return "'" + strings.ReplaceAll(arg0, "'", `'\''`) + "'"
	}
	return arg0
}

// redactDSN hides a password in a PostgreSQL DSN (URL or keyword form)
// before it is printed.
func redactDSN(dsn string) string {
	if sqlstore.IsPostgres(dsn) && !strings.Contains(dsn, "://") {
		return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
	}
	return dsn
}

func runOData(args []string) error {
	c, err := parseODataFlags("odata", args)
	if err != nil {
		return err
	}
	// The API alone reads the rate limit service's tracing variables too.
	settings, err := settings.FromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	c.tracing = settings.Tracing
	c.opts.Metrics = odata.NewMetrics()
	ctx, stop := signalContext()
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	warnEnv(log)
	s, err := startOData(ctx, c, log)
	if err != nil {
		return err
	}
	return s.run(ctx, c.drain, log, func() { s.printTryLines(os.Stdout, c.opts.Root, c.db) })
}

// parsePrefix reads a CIDR, or an address as the prefix of itself alone.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
