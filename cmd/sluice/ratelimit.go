package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport/tracing"
)

func runRateLimit(args []string) error {
	fs := newFlagSet("ratelimit", "ratelimit   (every setting comes from the environment)", rateLimitEnv)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("ratelimit takes no arguments, got %q", fs.Args())
	}
	ctx, stop := signalContext()
	defer stop()
	rl, err := startRateLimit(ctx, os.LookupEnv, nil)
	if err != nil {
		return err
	}
	return rl.run(ctx, nil)
}

// rateLimit is a built rate limit server and its logger.
type rateLimit struct {
	srv *server.Server
	log *slog.Logger
	// metricsPath is where pull metrics are served (PROMETHEUS_PATH), when on.
	metricsPath string
	// gcFloor is the heap floor in bytes (SLUICE_GC_HEAP_FLOOR_MIB), applied
	// while run runs.
	gcFloor uint64
	// pulled says the pull metrics endpoint is on (and serves the OData
	// metrics given to startRateLimit).
	pulled bool
	// tracing are the TRACING_* settings, which the OData API shares.
	tracing tracing.Settings
	// memoryMax is SLUICE_MEMORY_MAX_BYTES with the memory backend (0
	// otherwise): the Go runtime's memory limit is set from it while run runs.
	memoryMax int64
}

// rateLimitPlan is the rate limit service's settings and logger, read
// before anything is built, so that `serve` can start the OData API while
// the service waits for its backend.
type rateLimitPlan struct {
	settings settings.Settings
	log      *slog.Logger
	// pulled says the pull metrics endpoint is on.
	pulled bool
}

// planRateLimit reads the settings from the environment.
func planRateLimit(lookup func(string) (string, bool)) (*rateLimitPlan, error) {
	settings, err := settings.FromEnv(lookup)
	if err != nil {
		return nil, err
	}
	log, err := server.NewLogger(os.Stderr, settings.Log)
	if err != nil {
		return nil, err
	}
	warnEnv(log)
	return &rateLimitPlan{settings: settings, log: log, pulled: settings.Stats.UsePull && !settings.Stats.Disabled}, nil
}

// commandEnv are the variables the commands read themselves, beside the
// rate limit service's settings.
var commandEnv = []string{"SLUICE_DB", "SLUICE_DB_FILE", "SLUICE_TEST_MAIN"}

// warnEnv warns of each variable that looks meant for sluice but is not
// read (a misspelt setting would otherwise be silently ignored).
func warnEnv(log *slog.Logger) {
	for _, w := range settings.EnvWarnings(os.Environ(), commandEnv...) {
		log.Warn(w)
	}
}

// startRateLimit builds the rate limit service from the environment.
func startRateLimit(ctx context.Context, lookup func(string) (string, bool), od *odata.Metrics) (*rateLimit, error) {
	p, err := planRateLimit(lookup)
	if err != nil {
		return nil, err
	}
	return p.start(ctx, od)
}

// start builds the service (waiting for its backend, as the reference). With
// od (sluice serve), the OData API's metrics join the pull metrics
// endpoint when it is on, and its costliest keys are on the debug port.
func (p *rateLimitPlan) start(ctx context.Context, od *odata.Metrics) (*rateLimit, error) {
	settings, log, pulled := p.settings, p.log, p.pulled
	opts := server.Options{Settings: settings, Logger: log}
	if od != nil {
		if pulled {
			opts.MetricsCollectors = []prometheus.Collector{od}
		}
		opts.DebugEndpoints = map[string]server.DebugEndpoint{
			"/odata/topkeys": {Help: "the OData API keys whose requests took the most time (?n=20)", Handler: od.TopKeysHandler()},
		}
	}
	srv, err := server.NewServer(ctx, opts)
	if err != nil {
		return nil, err
	}
	rl := &rateLimit{srv: srv, log: log, metricsPath: settings.Stats.PullPath, pulled: pulled, tracing: settings.Tracing,
		gcFloor: uint64(settings.Runtime.GCHeapFloorMiB) << 20}
	if settings.Backend.Type == "memory" {
		rl.memoryMax = settings.Backend.Memory.MaxBytes
	}
	return rl, nil
}

func (r *rateLimit) run(ctx context.Context, ready chan<- struct{}) error {
	defer gcfloor.Start(r.gcFloor)()
	defer memory.LimitProcess(r.memoryMax)()
	listening := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-listening:
			if a := r.srv.MetricsAddr(); a != nil {
				fmt.Printf("pull metrics: http://%s%s\n", localAddr(a.String()), r.metricsPath)
			}
			if ready != nil {
				close(ready)
			}
		case <-done:
		}
	}()
	return r.srv.Run(ctx, listening)
}

// signalContext ends on SIGINT, SIGTERM or SIGHUP, as the reference's runner.
// The server marks itself unhealthy before it stops gracefully.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

func runConfigCheck(args []string) error {
	fs := newFlagSet("config-check", "config-check [-merge] <file.yaml>...\n       sluice config_check -config_dir DIR [-merge_domain_configs]")
	merge := fs.Bool("merge", false, "allow several files to share a domain (MERGE_DOMAIN_CONFIG)")
	dir := fs.String("config_dir", "", "path to directory containing rate limit configs (the reference's config_check)")
	mergeDomains := fs.Bool("merge_domain_configs", false, "whether to merge configurations, referencing the same domain")
	if err := parseFlags(fs, args); err != nil {
		return err // a bad flag exits 2, as the reference's flag handling
	}
	if *dir != "" || (fs.NArg() == 0 && isFlagSet(fs, "config_dir")) {
		return configCheckDir(*dir, *merge || *mergeDomains, fs.Args())
	}
	if fs.NArg() == 0 {
		return usagef("no files given: sluice config-check <file.yaml>...")
	}
	opts := engine.ConfigOptions{MergeDomains: *merge || *mergeDomains}
	files, err := checkEachFile(fs.Args(), opts)
	if err != nil {
		return err
	}
	cfg, err := engine.LoadConfig(files, opts)
	if err != nil {
		return err
	}
	fmt.Printf("ok: %d file(s), domains %v\n", len(files), cfg.Domains())
	// Rules using sluice's extensions (algorithm, counting), which the
	// reference rejects.
	for _, line := range strings.Split(cfg.Dump(), "\n") {
		if strings.Contains(line, ", algorithm: ") || strings.Contains(line, ", counting: ") {
			fmt.Println("  " + line)
		}
	}
	return nil
}

// checkEachFile reads and checks every file on its own, so that every
// broken file is reported (on stderr, one line each) and not only the
// first; what is wrong only across files (two files of one domain) is
// left to the load of all of them together.
func checkEachFile(paths []string, opts engine.ConfigOptions) ([]engine.ConfigFile, error) {
	var files []engine.ConfigFile
	broken := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err == nil {
			f := engine.ConfigFile{Name: path, YAML: data}
			files = append(files, f)
			_, err = engine.LoadConfig([]engine.ConfigFile{f}, opts)
		}
		if err != nil {
			broken++
			fmt.Fprintf(os.Stderr, "%s\n", err)
		}
	}
	if broken > 0 {
		return nil, fmt.Errorf("%d of %d file(s) broken", broken, len(paths))
	}
	return files, nil
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// configCheckDir is the reference's config_check: every file of the
// directory (not its subdirectories' files: a subdirectory fails to read, as
// there), named by its path, with the reference's lines on standard output
// and exit status 1 on any problem. Files given as arguments are checked
// with them.
func configCheckDir(dir string, merge bool, extra []string) error {
	fmt.Printf("checking rate limit configs...\n")
	fmt.Printf("loading config directory: %s\n", dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Printf("error opening directory %s: %s\n", dir, err)
		return exitCode(1)
	}
	paths := make([]string, 0, len(entries)+len(extra))
	for _, e := range entries {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	paths = append(paths, extra...)
	var files []engine.ConfigFile
	for _, path := range paths {
		fmt.Printf("opening config file: %s\n", path)
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("error reading file %s: %s\n", path, err)
			return exitCode(1)
		}
		files = append(files, engine.ConfigFile{Name: path, YAML: data})
	}
	if _, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: merge}); err != nil {
		fmt.Printf("error loading rate limit configs: %s\n", err)
		return exitCode(1)
	}
	fmt.Printf("all rate limit configs ok\n")
	return nil
}
