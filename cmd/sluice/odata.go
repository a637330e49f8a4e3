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
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/csvimport"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/transport"
)

// defaultODataDB is the embedded store used when no -db is given; var/ is
// ignored by git.
const defaultODataDB = "sqlite:var/odata.sqlite"

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", defaultODataDB, `store: "postgres://user@host/db" or "sqlite:/path/file.sqlite" (or $SLUICE_DB, or the file $SLUICE_DB_FILE: keeps a password off the command line)`)
}

// parseWithDB parses the command's arguments, then fills in the store from
// the environment when -db was not given (dbFromEnv).
func parseWithDB(fs *flag.FlagSet, args []string, db *string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return dbFromEnv(fs, db, os.LookupEnv)
}

// withStore opens the store for a command that works on it until done or
// interrupted (import, generate, keys), and closes it after.
func withStore(dsn string, fn func(ctx context.Context, store *sqlstore.DB) error) error {
	ctx, stop := signalContext()
	defer stop()
	store, err := openODataStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(ctx, store)
}

// dbFromEnv fills in the store from SLUICE_DB or SLUICE_DB_FILE (a file
// holding the URL, as a mounted secret) when -db was not given, so that a
// password need not be on the command line, where ps and the debug port's
// cmdline show it. Call it after fs.Parse.
func dbFromEnv(fs *flag.FlagSet, db *string, lookup func(string) (string, bool)) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "db" })
	env, envSet := lookup("SLUICE_DB")
	file, fileSet := lookup("SLUICE_DB_FILE")
	switch {
	case envSet && fileSet:
		return errors.New("SLUICE_DB and SLUICE_DB_FILE are both set; set one")
	case given:
		return nil
	case envSet:
		if strings.TrimSpace(env) == "" {
			return errors.New("SLUICE_DB is set but empty")
		}
		*db = strings.TrimSpace(env)
	case fileSet:
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("SLUICE_DB_FILE: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return fmt.Errorf("SLUICE_DB_FILE: %s is empty", file)
		}
		*db = v
	}
	return nil
}

// openODataStore opens a store, creating the directory of an SQLite file.
// cfgs is at most one Config (none: no statement timeout, for the
// maintenance commands).
func openODataStore(ctx context.Context, dsn string, cfgs ...sqlstore.Config) (*sqlstore.DB, error) {
	if !sqlstore.IsPostgres(dsn) {
		if dir := filepath.Dir(strings.TrimPrefix(dsn, "sqlite:")); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
	}
	var cfg sqlstore.Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	return sqlstore.OpenWith(ctx, dsn, cfg)
}

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
}

// odataFlags registers the OData API's flags on fs, with the documented
// defaults.
// parseODataFlags parses the flags of a command that serves the OData API
// (odata, serve).
func parseODataFlags(command string, args []string) (*odataConfig, error) {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	c := odataFlags(fs)
	return c, parseWithDB(fs, args, &c.db)
}

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
	fs.IntVar(&c.opts.PaceQueueTotal, "pace-queue-total", c.opts.PaceQueueTotal, "requests of all keys that may wait at once; one more gets 429")
	fs.StringVar(&c.proxies, "trusted-proxies", "", "comma-separated CIDRs or addresses of proxies whose Forwarded / X-Forwarded-* headers are believed (default: none)")
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
	fs.IntVar(&c.opts.KeyFailures, "key-failures", c.opts.KeyFailures, "failed key checks per client address per -key-failure-window before its key checks get 429 (0: no throttle)")
	fs.DurationVar(&c.opts.KeyFailureWindow, "key-failure-window", c.opts.KeyFailureWindow, "window of -key-failures")
	fs.IntVar(&c.opts.OriginMaxInFlight, "origin-max-in-flight", c.opts.OriginMaxInFlight, "requests in flight per browser origin (no key), all client addresses together (0: no cap)")
	fs.DurationVar(&c.drain, "odata-shutdown-timeout", 10*time.Second, "on SIGTERM, how long OData responses in progress may take to finish before they are cut")
	fs.IntVar(&c.demoRows, "demo-rows", odata.DemoRows, "observations generated into an empty store on first start")
	fs.BoolVar(&c.accessLog, "access-log", true, "one line per OData request on stderr (text or JSON as LOG_FORMAT)")
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
	demoKey string                     // set when demo data and key were prepared
}

// startOData opens the store (generating demo data into an empty one), builds
// the limiter and the server, and listens. It prints progress to stderr.
func startOData(ctx context.Context, c *odataConfig, log *slog.Logger) (_ *odataService, err error) {
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
				return nil, fmt.Errorf("-trusted-proxies: %q is neither a CIDR (10.0.0.0/8) nor an address: %w", p, err)
			}
			c.opts.TrustedProxies = append(c.opts.TrustedProxies, prefix)
		}
	}
	c.opts.Logger = log
	if c.accessLog {
		// Its own logger at info level: the access log is not silenced by
		// LOG_LEVEL=warn, only by -access-log=false.
		al, err := transport.NewLogger(os.Stderr, transport.LogSettings{Level: "info", Format: os.Getenv("LOG_FORMAT")})
		if err != nil {
			return nil, err
		}
		c.opts.AccessLog = al
	}
	if err := c.opts.Validate(); err != nil {
		return nil, err
	}
	if c.drain <= 0 {
		return nil, errors.New("-odata-shutdown-timeout must be positive")
	}
	switch c.fallback {
	case "local", "deny", "allow":
	default:
		return nil, fmt.Errorf("-rate-limit-fallback must be local, deny or allow, got %q", c.fallback)
	}
	if c.rateService != "" && c.fallback == "local" && c.rps == 0 {
		return nil, errors.New("-rate-limit-fallback local needs -requests-per-second above 0 (the limit that applies while the service is down)")
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
	empty, err := db.Empty(ctx)
	if err != nil {
		return nil, err
	}
	if empty {
		fmt.Fprintf(os.Stderr, "The OData store %s is empty: generating %d demo observations.\n", redact.String(c.db), c.demoRows)
		bar := newProgressBar(os.Stderr, "generate", "rows")
		s.demoKey, err = odata.EnsureDemo(ctx, db, c.demoRows, bar.update)
		bar.finish()
		if err != nil {
			return nil, err
		}
	} else if c.db == defaultODataDB {
		// The embedded demo store: a fresh key each start, so the printed
		// curl lines work (keys are stored hashed and cannot be shown again).
		if s.demoKey, err = odata.EnsureDemo(ctx, db, 0, nil); err != nil {
			return nil, err
		}
	}
	var lim odata.RateLimiter
	switch {
	case c.rateService != "":
		r, err := odata.NewRemoteLimiter(odata.RemoteLimiterOptions{Target: c.rateService, Timeout: time.Second})
		if err != nil {
			return nil, err
		}
		s.limiter, lim = r, r
		switch c.fallback {
		case "local":
			l, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: uint32(c.rps), Burst: uint32(c.burst)})
			if err != nil {
				return nil, err
			}
			s.extra = l
			lim = odata.NewFallbackLimiter(r, l, log)
		case "deny":
			c.opts.FailOpen = false
		case "allow":
			c.opts.FailOpen = true
		}
	case c.rps > 0:
		l, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: uint32(c.rps), Burst: uint32(c.burst)})
		if err != nil {
			return nil, err
		}
		s.limiter, lim = l, l
	}
	if s.srv, err = odata.NewServer(c.opts, db, db, lim); err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", c.opts.Addr); err != nil {
		return nil, fmt.Errorf("odata: listen on %s: %w", c.opts.Addr, err)
	}
	return s, nil
}

// run serves until ctx ends, then shuts down (giving responses in progress
// drain to finish) and closes the store. A shutdown that had to cut
// responses at the deadline is still the clean end that was asked for: it
// is logged, and run returns nil (exit status 0).
func (s *odataService) run(ctx context.Context, drain time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), drain)
		serr := s.srv.Shutdown(sctx)
		cancel()
		if serr != nil {
			log.Warn("odata: responses still streaming at the shutdown deadline were cut", "deadline", drain, "err", serr)
		}
		err = <-errc
	}
	s.close()
	return err
}

func (s *odataService) close() {
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
	ctx, stop := signalContext()
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	s, err := startOData(ctx, c, log)
	if err != nil {
		return err
	}
	s.printTryLines(os.Stdout, c.opts.Root, c.db)
	return s.run(ctx, c.drain, log)
}

func runImport(args []string) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	db := dbFlag(fs)
	meta := fs.String("metadata", "", "metadata JSON of the dataset the CSV files belong to (default: each CSV's <name>.json)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sluice import [-db DSN] [-metadata FILE.json] FILE.csv...")
		fs.PrintDefaults()
	}
	if err := parseWithDB(fs, args, db); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no CSV file given")
	}
	// Group the files by dataset, in the order given.
	var sets []csvimport.Dataset
	index := map[string]int{}
	for _, f := range fs.Args() {
		m := *meta
		if m == "" {
			m = strings.TrimSuffix(f, filepath.Ext(f)) + ".json"
		}
		i, ok := index[m]
		if !ok {
			i = len(sets)
			index[m] = i
			sets = append(sets, csvimport.Dataset{Metadata: m})
		}
		sets[i].CSV = append(sets[i].CSV, f)
	}
	return withStore(*db, func(ctx context.Context, store *sqlstore.DB) error {
		bar := newProgressBar(os.Stderr, "import", "bytes")
		res, err := csvimport.Import(ctx, store, sets, bar.update)
		bar.finish()
		if err != nil {
			return fmt.Errorf("nothing was imported: %w", err)
		}
		fmt.Printf("imported %d datasets, %d locations, %d observations into %s\n", res.Datasets, res.Locations, res.Observations, redact.String(*db))
		return nil
	})
}

func runGenerate(args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	db := dbFlag(fs)
	rows := fs.Int64("rows", odata.DemoRows, "observations to generate")
	seed := fs.Uint64("seed", 1, "random seed (the same seed gives the same data; use another to add more)")
	datasets := fs.Int("datasets", 0, "datasets (default: grows with -rows, dozens)")
	locations := fs.Int("locations", 0, "locations (default: grows with -rows, up to thousands)")
	if err := parseWithDB(fs, args, db); err != nil {
		return err
	}
	cfg := gen.Config{Rows: *rows, Datasets: *datasets, Locations: *locations, Seed: *seed}
	if err := cfg.Validate(); err != nil {
		return err
	}
	g, err := gen.New(cfg)
	if err != nil {
		return err
	}
	return withStore(*db, func(ctx context.Context, store *sqlstore.DB) error {
		start := time.Now()
		bar := newProgressBar(os.Stderr, "generate", "rows")
		res, err := gen.Load(ctx, store, g, func(done int64) { bar.update(done, *rows) })
		bar.finish()
		if err != nil {
			return fmt.Errorf("nothing was added: %w", err)
		}
		fmt.Printf("generated %d datasets, %d locations, %d observations into %s in %s (indexes and statistics included)\n",
			res.Datasets, res.Locations, res.Observations, redact.String(*db), time.Since(start).Round(time.Second))
		return nil
	})
}

// keysUsage is the help of `sluice keys`.
const keysUsage = `usage: sluice keys <command> [-db DSN] [args]

commands:
  add NAME          create a key; its secret is printed once (only its SHA-256 is stored)
  list              list keys: id, name, creation and revocation times (never secrets)
  revoke ID|NAME    revoke the active keys with that id or name (403 from then on)

flags:
  -db DSN           store: "postgres://user@host/db" or "sqlite:/path/file.sqlite" (default ` + defaultODataDB + `)
`

func runKeys(args []string) error {
	return runKeysTo(os.Stdout, args)
}

func runKeysTo(out io.Writer, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, keysUsage)
		return errors.New("no keys command given (add, list, revoke)")
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(out, keysUsage)
		return nil
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), keysUsage) }
	db := dbFlag(fs)
	if err := parseWithDB(fs, args[1:], db); err != nil {
		return err
	}
	// Each command checks its arguments before the store is opened.
	var run func(ctx context.Context, store *sqlstore.DB) error
	switch sub {
	case "add":
		if fs.NArg() != 1 {
			return errors.New("usage: sluice keys add [-db DSN] NAME")
		}
		run = func(ctx context.Context, store *sqlstore.DB) error {
			secret, k, err := store.AddKey(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "key %s (%s) created. Its secret is shown only now:\n%s\n", k.ID, k.Name, secret)
			return nil
		}
	case "list":
		run = func(ctx context.Context, store *sqlstore.DB) error { return listKeys(ctx, out, store) }
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("usage: sluice keys revoke [-db DSN] ID|NAME")
		}
		run = func(ctx context.Context, store *sqlstore.DB) error {
			n, err := store.RevokeKey(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("no active key has the id or name %q", fs.Arg(0))
			}
			fmt.Fprintf(out, "revoked %d key(s)\n", n)
			return nil
		}
	default:
		return fmt.Errorf("unknown keys command %q (add, list, revoke; see sluice keys --help)", sub)
	}
	return withStore(*db, run)
}

// listKeys prints the keys as a table, oldest first.
func listKeys(ctx context.Context, out io.Writer, store *sqlstore.DB) error {
	keys, err := store.ListKeys(ctx)
	if err != nil {
		return err
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].CreatedAt < keys[j].CreatedAt })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := k.RevokedAt
		if revoked == "" {
			revoked = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Name, k.CreatedAt, revoked)
	}
	return tw.Flush()
}

// progressBar draws `label [=====>    ]  45%  4.5M/10.0M rows  210k rows/s  ETA 25s`
// on a terminal, redrawn at most five times a second; elsewhere it prints a
// line every ten seconds.
type progressBar struct {
	w           io.Writer
	label       string
	unit        string
	tty         bool
	start       time.Time
	last        time.Time
	done, total int64
	drawn       bool
}

func newProgressBar(w *os.File, label, unit string) *progressBar {
	fi, err := w.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progressBar{w: w, label: label, unit: unit, tty: tty, start: time.Now()}
}

func (p *progressBar) update(done, total int64) {
	p.done, p.total = done, total
	every := 200 * time.Millisecond
	if !p.tty {
		every = 10 * time.Second
	}
	if now := time.Now(); now.Sub(p.last) >= every {
		p.last = now
		p.draw()
	}
}

func (p *progressBar) draw() {
	if p.total <= 0 {
		return
	}
	frac := float64(p.done) / float64(p.total)
	frac = min(max(frac, 0), 1)
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	elapsed := time.Since(p.start).Seconds()
	rate := float64(p.done) / max(elapsed, 1e-9)
	eta := "-"
	if rate > 0 && p.done < p.total {
		eta = (time.Duration(float64(p.total-p.done)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("%s [%s] %3.0f%%  %s/%s %s  %s %s/s  ETA %s", p.label, bar, frac*100,
		human(float64(p.done)), human(float64(p.total)), p.unit, human(rate), p.unit, eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r%-100s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.drawn = true
}

// finish draws the final state and ends the line.
func (p *progressBar) finish() {
	if p.total > 0 {
		p.draw()
	}
	if p.drawn && p.tty {
		fmt.Fprintln(p.w)
	}
}

func human(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
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
