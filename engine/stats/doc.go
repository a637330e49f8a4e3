// Package stats holds the rate limit statistics in process: counters, gauges
// and timers named as the reference service names them
// (ratelimit.service.rate_limit.<domain>.<key>.over_limit, ...).
//
// The engine only increments values; sinks (statsd, tagged statsd, pull
// metrics, standard output) live at the edge and read deltas with Each.
package stats
