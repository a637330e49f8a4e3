package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

func init() {
	registerCommand("ratelimit", "run the rate limit service alone (settings from the environment)", runRateLimit)
	registerCommand("config-check", "validate rate limit YAML files: sluice config-check <file>...", runConfigCheck)
}

func runRateLimit(args []string) error {
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	rl, err := startRateLimit(ctx, os.LookupEnv)
	if err != nil {
		return err
	}
	return rl.run(ctx, nil)
}

// rateLimit is a built rate limit server and its logger.
type rateLimit struct {
	srv *transport.Server
	log *slog.Logger
	// metricsPath is where pull metrics are served (PROMETHEUS_PATH), when on.
	metricsPath string
}

func startRateLimit(ctx context.Context, lookup func(string) (string, bool)) (*rateLimit, error) {
	settings, err := transport.SettingsFromEnv(lookup)
	if err != nil {
		return nil, err
	}
	log, err := transport.NewLogger(os.Stderr, settings.Log)
	if err != nil {
		return nil, err
	}
	srv, err := transport.NewServer(ctx, transport.Options{Settings: settings, Logger: log})
	if err != nil {
		return nil, err
	}
	return &rateLimit{srv: srv, log: log, metricsPath: settings.Stats.PullPath}, nil
}

func (r *rateLimit) run(ctx context.Context, ready chan<- struct{}) error {
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
	fs := flag.NewFlagSet("config-check", flag.ContinueOnError)
	merge := fs.Bool("merge", false, "allow several files to share a domain (MERGE_DOMAIN_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sluice config-check [-merge] <file.yaml>...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no files given")
	}
	var files []engine.ConfigFile
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, engine.ConfigFile{Name: path, YAML: data})
	}
	cfg, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: *merge})
	if err != nil {
		return err
	}
	fmt.Printf("ok: %d file(s), domains %v\n", len(files), cfg.Domains())
	// Rules using sluice's algorithm extension, which the reference rejects.
	for _, line := range strings.Split(cfg.Dump(), "\n") {
		if strings.Contains(line, ", algorithm: ") {
			fmt.Println("  " + line)
		}
	}
	return nil
}
