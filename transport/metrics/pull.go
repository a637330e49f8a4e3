package metrics

import (
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

//go:embed default_mapping.yaml
var defaultMapping string

// DefaultMapping is the embedded statsd_exporter mapping used when no
// PROMETHEUS_MAPPER_YAML is given.
func DefaultMapping() string { return defaultMapping }

// pullSink feeds statistics, as statsd events, to an in-process
// statsd_exporter whose metrics live in a private Prometheus registry.
type pullSink struct {
	reg    *prometheus.Registry
	events chan event.Events
	done   chan struct{} // closed when the exporter's goroutine has returned
	tags   map[string]string
}

func newPullSink(s Settings, log *slog.Logger) (*pullSink, error) {
	m := &mapper.MetricMapper{}
	var err error
	if s.PullMapperFile != "" {
		err = m.InitFromFile(s.PullMapperFile)
	} else {
		mapping := defaultMapping
		if s.PullResponseTimeMillis {
			mapping = strings.Replace(mapping, "    scale: 0.001\n", "", 1)
		}
		err = m.InitFromYAMLString(mapping)
	}
	if err != nil {
		return nil, fmt.Errorf("pull metrics mapping: %w", err)
	}
	reg := prometheus.NewRegistry()
	auto := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	actions := auto(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_actions_total", Help: "The total number of StatsD events by action."}, []string{"action"})).(*prometheus.CounterVec)
	unmapped := auto(prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for."})).(prometheus.Counter)
	errorsVec := auto(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_error_total", Help: "The total number of StatsD events discarded due to errors."}, []string{"reason"})).(*prometheus.CounterVec)
	eventsVec := auto(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_total", Help: "The total number of StatsD events seen."}, []string{"type"})).(*prometheus.CounterVec)
	conflicts := auto(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_conflict_total", Help: "The total number of StatsD events with conflicting names."}, []string{"type", "metric_name"})).(*prometheus.CounterVec)
	count := auto(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"})).(*prometheus.GaugeVec)

	ex := exporter.NewExporter(reg, m, log, actions, unmapped, errorsVec, eventsVec, conflicts, count)
	p := &pullSink{reg: reg, events: make(chan event.Events), done: make(chan struct{}), tags: s.ExtraTags}
	go func() {
		defer close(p.done)
		ex.Listen(p.events) // returns when events is closed
	}()
	return p, nil
}

// labels is a fresh label map per event: the exporter adds the mapping's
// labels to it in place.
func (p *pullSink) labels() map[string]string {
	l := make(map[string]string, len(p.tags))
	for k, v := range p.tags {
		l[k] = v
	}
	return l
}

func (p *pullSink) send(batch []sample) {
	evs := make(event.Events, 0, len(batch))
	for _, m := range batch {
		switch m.kind {
		case kindCounter:
			evs = append(evs, &event.CounterEvent{CMetricName: m.name, CValue: float64(m.delta), CLabels: p.labels()})
		case kindGauge:
			evs = append(evs, &event.GaugeEvent{GMetricName: m.name, GValue: float64(m.gauge), GLabels: p.labels()})
		case kindTimer:
			for _, ms := range m.timings {
				evs = append(evs, &event.ObserverEvent{OMetricName: m.name, OValue: ms, OLabels: p.labels()})
			}
		}
	}
	p.events <- evs
	// The exporter takes the next batch only after it has applied this one,
	// so an empty send returns once every value above is visible to a scrape.
	p.events <- nil
}

// handler flushes, then serves the registry, so a scrape always sees the
// statistics up to that moment rather than up to the last timed flush.
func (p *pullSink) handler(flush func()) http.Handler {
	h := promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		flush()
		h.ServeHTTP(w, r)
	})
}

func (p *pullSink) close() error {
	close(p.events)
	<-p.done
	return nil
}
