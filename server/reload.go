package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport/xds"
)

// configSource produces configuration events until its context ends, then
// closes the channel. FileSource is one; the xDS client is another.
type configSource interface {
	Run(ctx context.Context, out chan<- ConfigEvent) error
}

// loader applies configuration events to the engine, keeping the previous
// rules when a load fails.
type loader struct {
	source       configSource
	svc          *engine.Service
	health       *health
	log          *slog.Logger
	mergeDomains bool

	loadSuccess, loadError *stats.Counter
	// loadEmpty counts the loads that left no domain (sluice only); where
	// says where the rules were looked for, in the warning of each.
	loadEmpty    *stats.Counter
	where        string
	runtimeStats *runtimeStats // nil unless CONFIG_TYPE=FILE

	// parse is svc.LoadConfig (a test's stand-in may block); parses are
	// the ones running, abandoned or not (see applyWithin).
	parse  func(files []engine.ConfigFile, merge bool) (*engine.Config, error)
	parses sync.WaitGroup
}

// runtimeStats are the reference's goruntime loader figures: every reload
// of the rule files is an attempt; num_values is the number of files read.
type runtimeStats struct {
	attempts, failures *stats.Counter
	numValues          *stats.Gauge
}

// newConfigSource is the source CONFIG_TYPE names.
func newConfigSource(s settings.Settings, o Options, x *xds.Source) (configSource, error) {
	switch {
	case s.Config.Type == "FILE":
		return NewFileSource(s.Config, o.Logger), nil
	case x != nil:
		return xdsConfigSource{x}, nil
	}
	return nil, fmt.Errorf("no configuration source for CONFIG_TYPE=%s", s.Config.Type)
}

func newLoader(s settings.Settings, o Options, src configSource, svc *engine.Service, h *health) *loader {
	l := &loader{source: src, svc: svc, health: h, log: o.Logger, mergeDomains: s.Config.MergeDomains,
		loadSuccess: o.Stats.Counter("ratelimit.service.config_load_success"),
		loadError:   o.Stats.Counter("ratelimit.service.config_load_error"),
		loadEmpty:   o.Stats.Counter("ratelimit.service.config_load_empty"),
		parse:       svc.LoadConfig,
		where:       "the xDS management server's configuration",
	}
	if s.Config.Type == "FILE" {
		l.where = "the rules directory " + (&FileSource{s: s.Config}).dir() + " (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY)"
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

// applyWithin applies ev unless ctx ends first, and then says false: the
// parse of a large rule set runs on by itself (bounded by
// SLUICE_CONFIG_MAX_BYTES) and its outcome is dropped, so that a shutdown
// never waits for it.
func (l *loader) applyWithin(ctx context.Context, ev ConfigEvent) bool {
	if ev.Err != nil {
		l.apply(ev, nil)
		return true
	}
	type parsed struct {
		cfg *engine.Config
		err error
	}
	done := make(chan parsed, 1)
	l.parses.Add(1)
	go func() {
		defer l.parses.Done()
		cfg, err := l.parse(ev.Files, l.mergeDomains)
		done <- parsed{cfg, err}
	}()
	select {
	case p := <-done:
		if p.err != nil {
			ev.Err = p.err
		}
		l.apply(ev, p.cfg)
		return true
	case <-ctx.Done():
		l.log.Warn("shutting down during a configuration load; its outcome is dropped")
		return false
	}
}

// apply loads one configuration event, parsed into cfg (nil: parse it
// here); a failure keeps the previous config.
func (l *loader) apply(ev ConfigEvent, cfg *engine.Config) {
	err := l.load(ev, cfg)
	if ev.Applied != nil {
		select {
		case ev.Applied <- err:
		default: // a source that asked must leave room; never block the loader
		}
	}
}

func (l *loader) load(ev ConfigEvent, cfg *engine.Config) error {
	if rs := l.runtimeStats; rs != nil {
		rs.attempts.Inc()
		if ev.Err != nil {
			rs.failures.Inc()
		} else {
			rs.numValues.Set(int64(len(ev.Files)))
		}
	}
	err := ev.Err
	if err == nil && cfg == nil {
		cfg, err = l.parse(ev.Files, l.mergeDomains)
	}
	if err != nil {
		l.loadError.Inc()
		l.log.Error("Error loading new configuration: " + err.Error())
		if c := l.svc.Config(); c == nil || len(c.Domains()) == 0 {
			l.noRules("could not be read")
		}
		return err
	}
	l.svc.SetConfig(cfg)
	l.loadSuccess.Inc()
	l.health.set(componentConfig, len(cfg.Domains()) > 0)
	if len(cfg.Domains()) == 0 {
		what := "is missing or has no rule file"
		if len(ev.Files) > 0 {
			what = fmt.Sprintf("has %d file(s) but no domain", len(ev.Files))
		}
		l.noRules(what)
	}
	l.log.Info("Successfully loaded new configuration")
	return nil
}

// noRules warns, at every load that leaves no domain, that every request
// will be answered OK: as the reference, the service does not refuse to
// run without rules (a missing directory is no error), but it says so.
func (l *loader) noRules(what string) {
	l.loadEmpty.Inc()
	l.log.Warn(fmt.Sprintf("NO RATE LIMIT RULES: %s %s; every request is answered OK until rules are loaded. "+
		"Set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true to fail /healthcheck meanwhile", l.where, what))
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
