package odata

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/odata/sqlstore"
)

// Metrics are the OData API's Prometheus metrics. One Metrics serves one
// Server (Options.Metrics); register it once in the registry a scrape reads
// (the rate limit service's pull metrics registry, or one of its own).
//
// No label takes a value a caller chooses: collections, status codes,
// formats, codings and reasons are fixed sets, so the number of series is
// bounded whatever keys, filters and paths arrive. Which keys cost the most
// is answered by TopKeys, a bounded summary, never by a label.
type Metrics struct {
	requests      *prometheus.CounterVec   // collection, code, format, coding
	firstByte     *prometheus.HistogramVec // collection
	lastByte      *prometheus.HistogramVec // collection
	rows          *prometheus.CounterVec   // collection
	bytes         *prometheus.CounterVec   // collection, coding
	cost          *prometheus.HistogramVec // collection
	inFlight      prometheus.Gauge
	waited        prometheus.Counter
	waiting       prometheus.Gauge
	refused       *prometheus.CounterVec // reason
	keyFails      *prometheus.CounterVec // reason
	cut           *prometheus.CounterVec // reason
	limiterErrors prometheus.Counter

	top *topKeys

	// srv is the server whose pools the scrape-time gauges read.
	srv atomic.Pointer[Server]

	slotsInUse, slotsMax, poolInUse, poolIdle, poolMax, poolWaits, poolWaitSeconds *prometheus.Desc
}

// Reasons a request is refused before any database work, as the refused
// metric names them.
const (
	refusedQueueFull    = "queue_full"       // 429: PaceQueue of its key (or PaceQueueTotal) already waiting
	refusedTurnTimeout  = "turn_timeout"     // 429: no turn within PaceWait
	refusedRate         = "rate"             // 429: its token comes after PaceWait
	refusedOrigin       = "origin_in_flight" // 429: OriginMaxInFlight
	refusedKeyThrottled = "key_throttled"    // 429: too many failed key checks from its address
	refusedGone         = "client_gone"      // 503: the client left while it waited
	refusedClosing      = "shutting_down"    // 503
	refusedLimiterDown  = "limiter_down"     // 503: the rate limiter failed (fail closed)
	refusedSlotsBusy    = "slots_busy"       // 503: no data slot within SlotWait
)

// Reasons a streamed body ends before its last byte.
const (
	cutStallPreempt = "stall_preempt"  // its slot went to a waiting request
	cutStallTimeout = "stall_timeout"  // its client accepted no byte for StallTimeout
	cutStreamTime   = "stream_timeout" // StreamTimeout
	cutShutdown     = "shutdown"       // the shutdown deadline
	cutDatabase     = "database"       // the cursor failed
	cutClientGone   = "client_gone"    // the client closed its connection
)

// latencyBuckets span a cached key check (a millisecond) to a page read by
// a slow client (minutes).
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// costBuckets are sqlstore.Cost units: an index range is 4, a scan 16 and
// more, the default budget 256.
var costBuckets = []float64{1, 4, 8, 16, 32, 64, 128, 256, 512}

// NewMetrics builds the metrics.
func NewMetrics() *Metrics {
	const ns = "sluice_odata_"
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "requests_total",
			Help: "OData requests answered, by collection, status code, format (json, csv) and content coding (identity, gzip, zstd, br)."},
			[]string{"collection", "code", "format", "coding"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "first_byte_seconds",
			Help: "From the request to the first byte of its answer (for a page: the probe, the cursor and the first rows).", Buckets: latencyBuckets},
			[]string{"collection"}),
		lastByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "last_byte_seconds",
			Help: "From the request to the last byte of its answer, at the pace its client reads.", Buckets: latencyBuckets},
			[]string{"collection"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "rows_total",
			Help: "Rows served."}, []string{"collection"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "response_bytes_total",
			Help: "Response body bytes sent, after compression."}, []string{"collection", "coding"}),
		cost: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "query_cost",
			Help: "Cost of each query's $filter in sqlstore.Cost units (the -filter-budget scale), refused ones included.", Buckets: costBuckets},
			[]string{"collection"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "requests_in_flight",
			Help: "Requests being answered, waiting ones and streaming bodies included."}),
		waited: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "pacing_waited_total",
			Help: "Requests that waited for their key's turn or rate limit token."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "pacing_waiting",
			Help: "Requests waiting now for their key's turn or rate limit token."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "refused_total",
			Help: "Requests refused before any database work (429 or 503), by reason."}, []string{"reason"}),
		keyFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "key_check_failures_total",
			Help: "Requests without a usable API key: missing (401), unknown or revoked (403)."}, []string{"reason"}),
		cut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "streams_cut_total",
			Help: "Response bodies that ended before their last byte, by reason."}, []string{"reason"}),
		limiterErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "limiter_errors_total",
			Help: "Rate limit decisions that failed (a remote rate limit service down or slow)."}),
		top: newTopKeys(topKeysTracked),

		slotsInUse: prometheus.NewDesc(ns+"data_slots_in_use", "Data query slots held (requests doing database work or streaming rows).", nil, nil),
		slotsMax:   prometheus.NewDesc(ns+"data_slots_max", "Data query slots (-max-queries in effect).", nil, nil),
		poolInUse:  prometheus.NewDesc(ns+"db_connections_in_use", "Database pool connections taken.", nil, nil),
		poolIdle:   prometheus.NewDesc(ns+"db_connections_idle", "Database pool connections open and idle.", nil, nil),
		poolMax:    prometheus.NewDesc(ns+"db_connections_max", "Database pool size.", nil, nil),
		poolWaits: prometheus.NewDesc(ns+"db_pool_waits_total",
			"Connection requests that found the pool empty and waited.", nil, nil),
		poolWaitSeconds: prometheus.NewDesc(ns+"db_pool_wait_seconds_total",
			"Time spent waiting for a pool connection; its rate is the mean number of requests waiting.", nil, nil),
	}
	// The fixed reasons exist from the start at 0, so a dashboard and an
	// alert see a series before its first event.
	for _, r := range []string{refusedQueueFull, refusedTurnTimeout, refusedRate, refusedOrigin, refusedKeyThrottled, refusedGone, refusedClosing, refusedLimiterDown, refusedSlotsBusy} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range []string{"missing", "unknown"} {
		m.keyFails.WithLabelValues(r)
	}
	for _, r := range []string{cutStallPreempt, cutStallTimeout, cutStreamTime, cutShutdown, cutDatabase, cutClientGone} {
		m.cut.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.firstByte, m.lastByte, m.rows, m.bytes, m.cost, m.inFlight,
		m.waited, m.waiting, m.refused, m.keyFails, m.cut, m.limiterErrors}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.slotsInUse, m.slotsMax, m.poolInUse, m.poolIdle, m.poolMax, m.poolWaits, m.poolWaitSeconds} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. The pool and slot figures are
// read now, from the server, rather than kept current on the hot path.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	s := m.srv.Load()
	if s == nil {
		return
	}
	if s.slots != nil {
		ch <- prometheus.MustNewConstMetric(m.slotsInUse, prometheus.GaugeValue, float64(s.slots.inUse()))
		ch <- prometheus.MustNewConstMetric(m.slotsMax, prometheus.GaugeValue, float64(s.slots.size))
	}
	if p, ok := s.store.(PoolReporter); ok {
		st := p.PoolStats()
		ch <- prometheus.MustNewConstMetric(m.poolInUse, prometheus.GaugeValue, float64(st.InUse))
		ch <- prometheus.MustNewConstMetric(m.poolIdle, prometheus.GaugeValue, float64(st.Idle))
		ch <- prometheus.MustNewConstMetric(m.poolMax, prometheus.GaugeValue, float64(st.Max))
		ch <- prometheus.MustNewConstMetric(m.poolWaits, prometheus.CounterValue, float64(st.Waits))
		ch <- prometheus.MustNewConstMetric(m.poolWaitSeconds, prometheus.CounterValue, st.WaitTime.Seconds())
	}
}

// PoolReporter is a store that reports its connection pool; *sqlstore.DB
// is one.
type PoolReporter interface{ PoolStats() sqlstore.PoolStats }

// request records one answered request.
func (m *Metrics) request(r *accessRecord, status int, bytes int64, end time.Time) {
	if m == nil {
		return
	}
	coll := r.coll
	if coll == "" {
		coll = "none"
	}
	format := "json"
	if r.csv {
		format = "csv"
	}
	coding := r.coding
	if coding == "" {
		coding = "identity"
	}
	m.requests.WithLabelValues(coll, statusLabel(status), format, coding).Inc()
	first := r.firstByte
	if first.IsZero() {
		first = end
	}
	m.firstByte.WithLabelValues(coll).Observe(first.Sub(r.start).Seconds())
	m.lastByte.WithLabelValues(coll).Observe(end.Sub(r.start).Seconds())
	if r.rows > 0 {
		m.rows.WithLabelValues(coll).Add(float64(r.rows))
	}
	m.bytes.WithLabelValues(coll, coding).Add(float64(bytes))
	if r.caller != "" && r.dbWork {
		m.top.add(r.caller, keyCost{Requests: 1, Rows: r.rows, Bytes: bytes, Cost: int64(r.cost), Seconds: end.Sub(r.start).Seconds()})
	}
}

// statusLabel is the status code as a label; codes are a small fixed set
// (every status the server answers is its own).
func statusLabel(code int) string {
	if code >= 100 && code < 600 {
		return statusText[code/100][code%100]
	}
	return "other"
}

// statusText holds the decimal text of every status code, built once so
// that labelling a request allocates nothing.
var statusText = func() (t [6][100]string) {
	for c := 100; c < 600; c++ {
		t[c/100][c%100] = itoa3(c)
	}
	return t
}()

func itoa3(c int) string {
	return string([]byte{byte('0' + c/100), byte('0' + c/10%10), byte('0' + c%10)})
}

func (m *Metrics) refuse(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) keyFailed(reason string) {
	if m != nil {
		m.keyFails.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) streamCut(reason string) {
	if m != nil {
		m.cut.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) queryCost(coll string, cost int) {
	if m != nil {
		m.cost.WithLabelValues(coll).Observe(float64(cost))
	}
}

func (m *Metrics) limiterFailed() {
	if m != nil {
		m.limiterErrors.Inc()
	}
}

// startWait marks a request waiting for its turn or token; the returned
// function ends the wait.
func (m *Metrics) startWait() func() {
	if m == nil {
		return func() {}
	}
	m.waited.Inc()
	m.waiting.Inc()
	return m.waiting.Dec
}

func (m *Metrics) begin() {
	if m != nil {
		m.inFlight.Inc()
	}
}

func (m *Metrics) end() {
	if m != nil {
		m.inFlight.Dec()
	}
}
