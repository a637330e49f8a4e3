// Package metrics sends the rate limit service's statistics (an
// engine/stats.Store) to the one sink the operator chose, with the reference
// service's names, so dashboards and alerts built for envoyproxy/ratelimit
// keep working: plain statsd over TCP (the default), tagged statsd over UDP
// with mogrifiers, a Prometheus /metrics endpoint through the statsd_exporter
// mapper, or JSON lines on standard output.
//
// A Reporter owns one goroutine that flushes every FlushInterval: counters as
// the change since the previous flush, gauges as their value, timers drained.
// Sinks run on that goroutine only, so a slow or absent statsd server costs a
// dropped flush, never a blocked request.
package metrics
