package quota

import "github.com/sluicehq/sluice/engine/stats"

// metrics are the service's own statistics, beside the rules' (which
// count the reports as RLS decisions count requests).
type metrics struct {
	streams, buckets, reporters                                            *stats.Gauge
	reports, assignments, kept, abandons, refused                          *stats.Counter
	reserveErrors, releaseErrors, lookupErrors, overcommitted, boardErrors *stats.Counter
}

func newMetrics(s *stats.Store) metrics {
	const p = "ratelimit.rlqs."
	return metrics{
		streams:       s.Gauge(p + "streams"),
		buckets:       s.Gauge(p + "buckets"),
		reporters:     s.Gauge(p + "reporters"),
		reports:       s.Counter(p + "reports"),
		assignments:   s.Counter(p + "assignments"),
		kept:          s.Counter(p + "kept_assignments"),
		abandons:      s.Counter(p + "abandons"),
		refused:       s.Counter(p + "refused_buckets"),
		reserveErrors: s.Counter(p + "reserve_errors"),
		releaseErrors: s.Counter(p + "release_errors"),
		lookupErrors:  s.Counter(p + "lookup_errors"),
		overcommitted: s.Counter(p + "overcommitted"),
		boardErrors:   s.Counter(p + "board_errors"),
	}
}
