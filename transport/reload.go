package transport

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/transport/xds"
)

// ConfigSource produces configuration events until its context ends, then
// closes the channel. FileSource is one; the xDS client is another.
type ConfigSource interface {
	Run(ctx context.Context, out chan<- ConfigEvent) error
}

// loader applies configuration events to the engine, keeping the previous
// rules when a load fails.
type loader struct {
	source       ConfigSource
	svc          *engine.Service
	health       *Health
	log          *slog.Logger
	mergeDomains bool

	loadSuccess, loadError *stats.Counter
	runtimeStats           *runtimeStats // nil unless CONFIG_TYPE=FILE
}

// runtimeStats are the reference's goruntime loader figures: every reload
// of the rule files is an attempt; num_values is the number of files read.
type runtimeStats struct {
	attempts, failures *stats.Counter
	numValues          *stats.Gauge
}

// configSource is the caller's source, else the one CONFIG_TYPE names.
func configSource(s Settings, o Options, x *xds.Source) (ConfigSource, error) {
	switch {
	case o.ConfigSource != nil:
		return o.ConfigSource, nil
	case s.Config.Type == "FILE":
		return NewFileSource(s.Config, o.Logger), nil
	case x != nil:
		return xdsConfigSource{x}, nil
	}
	return nil, fmt.Errorf("no configuration source for CONFIG_TYPE=%s", s.Config.Type)
}

func newLoader(s Settings, o Options, src ConfigSource, svc *engine.Service, h *Health) *loader {
	l := &loader{source: src, svc: svc, health: h, log: o.Logger, mergeDomains: s.Config.MergeDomains,
		loadSuccess: o.Stats.Counter("ratelimit.service.config_load_success"),
		loadError:   o.Stats.Counter("ratelimit.service.config_load_error"),
	}
	if s.Config.Type == "FILE" {
		// The reference's file runtime (goruntime) counts its loads under
		// the "runtime" scope.
		l.runtimeStats = &runtimeStats{
			attempts:  o.Stats.Counter("runtime.load_attempts"),
			failures:  o.Stats.Counter("runtime.load_failures"),
			numValues: o.Stats.Gauge("runtime.num_values"),
		}
	}
	return l
}

// apply loads one configuration event; a failure keeps the previous config.
func (l *loader) apply(ev ConfigEvent) {
	err := l.load(ev)
	if ev.Applied != nil {
		select {
		case ev.Applied <- err:
		default: // a source that asked must leave room; never block the loader
		}
	}
}

func (l *loader) load(ev ConfigEvent) error {
	if rs := l.runtimeStats; rs != nil {
		rs.attempts.Inc()
		if ev.Err != nil {
			rs.failures.Inc()
		} else {
			rs.numValues.Set(int64(len(ev.Files)))
		}
	}
	cfg, err := (*engine.Config)(nil), ev.Err
	if err == nil {
		cfg, err = l.svc.LoadConfig(ev.Files, l.mergeDomains)
	}
	if err != nil {
		l.loadError.Inc()
		l.log.Error("Error loading new configuration: " + err.Error())
		return err
	}
	l.svc.SetConfig(cfg)
	l.loadSuccess.Inc()
	l.health.Set(ComponentConfig, len(cfg.Domains()) > 0)
	l.log.Info("Successfully loaded new configuration")
	return nil
}

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
