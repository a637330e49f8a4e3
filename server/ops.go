package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport"
	"github.com/sluicehq/sluice/transport/metrics"
	"github.com/sluicehq/sluice/transport/tlsreload"
	"github.com/sluicehq/sluice/transport/tracing"
	"github.com/sluicehq/sluice/transport/xds"
)

// ops are the operations features around the decision path. They are built
// by NewServer without starting anything, started by Run, and closed when Run
// returns.
type ops struct {
	log     *slog.Logger
	metrics *metrics.Reporter
	tls     *tlsreload.Reloader // nil without GRPC_SERVER_USE_TLS
	xds     *xds.Source         // nil unless CONFIG_TYPE=GRPC_XDS_SOTW
	tracing *tracing.Tracing    // nil without TRACING_ENABLED
	// backendKind names the store in trace spans (BACKEND_TYPE).
	backendKind string
}

// newOps builds the statistics sink, gRPC TLS, tracing and, with
// CONFIG_TYPE=GRPC_XDS_SOTW, the xDS client. refresh is called before each
// statistics flush.
func newOps(s settings.Settings, o Options, st *stats.Store, refresh func()) (ops, error) {
	p := ops{log: o.Logger, backendKind: s.Backend.Type}
	var err error
	// With every sink off the statistics are printed as the reference's
	// logging sink does, as debug lines: only when the log level lets
	// debug through, so that a quiet service is quiet (the runtime gauges
	// alone change at every flush with no traffic at all).
	stdout := o.StatsOutput
	if !o.Logger.Enabled(context.Background(), slog.LevelDebug) {
		stdout = io.Discard
	}
	p.metrics, err = metrics.New(s.Stats, st, metrics.Options{Logger: o.Logger, Stdout: stdout,
		Refresh: refresh, HTTPServer: s.Listen.HTTPTimeouts.Server, Collectors: o.MetricsCollectors})
	if err != nil {
		return ops{}, fmt.Errorf("statistics: %w", err)
	}
	if s.TLS.Enabled {
		if p.tls, err = tlsreload.New(s.TLS, tlsreload.Options{Logger: o.Logger}); err != nil {
			return ops{}, fmt.Errorf("gRPC server TLS: %w", err)
		}
	}
	if s.Tracing.Enabled {
		if p.tracing, err = tracing.New(s.Tracing, tracing.Options{Logger: o.Logger}); err != nil {
			return ops{}, err
		}
	}
	if s.Config.Type == "GRPC_XDS_SOTW" {
		// Validated before the ACK with the loader apply uses, on a private
		// stats store so a rejected rule set leaves no counters behind.
		validate := func(files []engine.ConfigFile) error {
			_, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: s.Config.MergeDomains})
			return err
		}
		if p.xds, err = xds.New(s.XDS, xds.Options{Logger: o.Logger, Validate: validate}); err != nil {
			return ops{}, fmt.Errorf("xDS configuration client: %w", err)
		}
	}
	return p, nil
}

// grpcServerOptions are what TLS and tracing add to the gRPC server, in that
// order, after the caller's own.
func (p *ops) grpcServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if p.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(p.tls.TLSConfig())))
	}
	if p.tracing != nil {
		opts = append(opts, p.tracing.GRPCServerOption())
	}
	return opts
}

// start starts what runs beside the listeners; goroutines that need to stop
// before the shards do join bg and end with ctx.
func (p *ops) start(ctx context.Context, bg *sync.WaitGroup) error {
	if p.tracing != nil {
		if err := p.tracing.Start(ctx); err != nil {
			return err
		}
	}
	if p.tls != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := p.tls.Watch(ctx); err != nil {
				p.log.Error("gRPC server TLS files are not watched; certificates will not reload", "error", err)
			}
		}()
	}
	return p.metrics.Start()
}

func (p *ops) close() {
	if p.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := p.tracing.Shutdown(ctx); err != nil {
			p.log.Warn("flushing traces", "error", err)
		}
		cancel()
	}
	if err := p.metrics.Close(); err != nil {
		p.log.Warn("closing the statistics sink", "error", err)
	}
}

// decider is the decision call of the gRPC and HTTP servers, traced when
// tracing is on.
func (p *ops) decider(d transport.Decider) transport.Decider {
	if p.tracing == nil {
		return d
	}
	return p.tracing.Decider(d)
}

func (p *ops) traceHTTP(h http.Handler) http.Handler {
	if p.tracing == nil {
		return h
	}
	return p.tracing.HTTPHandler(h)
}

func (p *ops) traceCounter(c engine.Counter) engine.Counter {
	if p.tracing == nil {
		return c
	}
	return p.tracing.Counter(c, p.backendKind)
}

// backendTracer spans every backend call the shards make; nil without tracing.
func (p *ops) backendTracer() func(engine.Backend) engine.Backend {
	t := p.tracing
	if t == nil {
		return nil
	}
	return func(b engine.Backend) engine.Backend { return t.Backend(b, p.backendKind) }
}
