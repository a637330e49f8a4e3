package odata

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Server. Start from DefaultOptions.
type Options struct {
	// Addr is where cmd/sluice listens (the Server itself serves any
	// listener it is given).
	Addr string
	// Root is the path prefix of the collections.
	Root string
	// PublicURL (scheme://host[:port], no path) is the origin next links
	// are built with. Empty: the request's Host, with https when the
	// request came over TLS, or the forwarded scheme and host of a trusted
	// proxy.
	PublicURL string
	// TrustedProxies are the peers whose Forwarded, X-Forwarded-Proto,
	// X-Forwarded-Host and X-Forwarded-For headers are believed: for next
	// links, and for the client address that browser callers and failed
	// key checks are counted by. Empty: none, the headers are ignored.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the one header a trusted proxy's client chain is
	// read from (the right-most hop in it that is not a trusted proxy is
	// the client): "X-Forwarded-For" (the default, also when empty: nginx,
	// Envoy and most load balancers append to it), "Forwarded" (RFC 7239
	// for=; then its proto= and host= are the link's scheme and host), or
	// another list of addresses such as "X-Real-IP". The proxy should
	// strip the others: they are ignored, whatever the client sends.
	ForwardedHeader string
	// MaxPageBytes caps the size of a page body (before compression); a
	// page that would exceed it is refused with 413 before streaming.
	MaxPageBytes int64
	// QueryTimeout is the time budget of a request's database work before
	// the response starts (probe, count, first row): 504 beyond it.
	QueryTimeout time.Duration
	// StallTimeout drops a client that accepts no byte of a response for
	// this long, so a stalled reader cannot hold a database connection.
	StallTimeout time.Duration
	// Gzip answers gzip to clients that accept it.
	Gzip bool
	// Brotli answers br to clients that offer it beside another coding
	// (never to "br" alone, see negotiate). Off by default: the official
	// clients advertise br without always being able to decode it
	// (odata-compat.md), so it is the operator's choice.
	Brotli bool
	// Zstd answers zstd to clients that accept it.
	Zstd bool
	// CORSOrigins are the browser origins (scheme://host[:port]) allowed to
	// call without a key; "*" is not accepted, origins are listed.
	CORSOrigins []string
	// Sequential makes a request wait for its turn while another of the
	// same key (or browser origin and address) is in flight.
	Sequential bool
	// PaceWait bounds how long a request waits for its key's turn and its
	// rate limit token (see pacer.go); past it the request gets 429 with
	// Retry-After. 0 refuses at once, as a plain rate limiter does.
	PaceWait time.Duration
	// PaceQueue is how many requests of one key may wait at once, and
	// PaceQueueTotal how many of all keys; one more gets 429 at once.
	// Anonymous (browser origin) callers have room of their own, half of
	// PaceQueueTotal (at least PaceQueue): they cannot take the keys'.
	PaceQueue      int
	PaceQueueTotal int
	// FailOpen serves requests when the rate limiter fails instead of
	// answering 503. A remote rate limit service is wrapped in a
	// FallbackLimiter by cmd/sluice, so its failures reach the server only
	// with -rate-limit-fallback deny.
	FailOpen bool
	// FilterBudget is the most a $filter may cost in the units of
	// sqlstore.Cost; a costlier filter is refused with 400 before any SQL
	// runs. 0 sets no budget.
	FilterBudget int
	// MaxQueries caps the requests whose database work (probe, count,
	// rows) runs at once, across all callers; a request beyond it gets
	// 503 with Retry-After. 0 derives it from the store's pool: its size
	// minus KeyConns, so that API key checks never wait behind data
	// queries. Negative: no cap.
	MaxQueries int
	// SlotWait is how long a request waits for a data slot when all are
	// taken, and StallPreempt how long a response's write may wait on its
	// client before its slot goes to such a waiting request (dataslots.go).
	SlotWait     time.Duration
	StallPreempt time.Duration
	// StreamTimeout bounds a whole response body, however slowly its
	// client reads (its statement's timeout on the database, too).
	StreamTimeout time.Duration
	// KeyCacheTTL is how long a checked API key is trusted without asking
	// the database again; a revocation takes effect within it. 0: no cache.
	KeyCacheTTL time.Duration
	// KeyFailures failed key checks (unknown or revoked keys) from one
	// client network (IPv4 /24, IPv6 /64) within KeyFailureWindow make its
	// further key checks answer 429 without a database lookup until the
	// window ends. 0: no throttle. Networks beyond the tracked ones share
	// a count that answers failed keys 429 but never refuses a valid one.
	KeyFailures      int
	KeyFailureWindow time.Duration
	// OriginMaxInFlight caps the requests in flight of one browser origin
	// (no key) across all client addresses; the sequential and per-second
	// rules apply per origin and client address.
	OriginMaxInFlight int
	// Logger receives request failures; nil discards them.
	Logger *slog.Logger
	// AccessLog receives one line per request (status, method, path and
	// query, caller as key id or origin — never the secret —, rows, bytes,
	// duration); nil: no access log.
	AccessLog *slog.Logger
	// Metrics, when set, counts requests, latencies, rows, bytes, refusals
	// and cut streams, and reads the pools at each scrape (metrics.go). One
	// Metrics per Server.
	Metrics *Metrics
	// MetricsPath, when set with Metrics, is a path of this port that
	// serves Metrics to Prometheus, for a process with no other pull
	// metrics endpoint. It must lie outside Root.
	MetricsPath string
	// TracerProvider, when set, traces each request: one span with its
	// collection, status and rows, and child spans for the key check, the
	// rate limit decision and the database work (tracing.go). Propagator
	// reads a caller's trace context from the request headers.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// AccessLogPerSecond bounds the access log: at most this many lines a
	// second on average (bursts of as many); the lines over it are counted
	// and the count is written on the next line as "suppressed".
	AccessLogPerSecond int
	// MaxConnections caps the connections open at once on the port; one
	// beyond it is answered 503 with Retry-After and closed. 0 derives it
	// from the process's file limit (40 %, netx.ShareOfFiles), negative:
	// no cap. Whatever the cap, Serve waits out a failed accept (out of
	// file descriptors) rather than stopping.
	MaxConnections int
}

// ODataFileShare is the percentage of the process's file limit a derived
// MaxConnections takes: the rate limit service's ports take 45 % more
// (settings.DefaultMaxConnections), the rest is left to files, the store
// and the backends.
const ODataFileShare = 40

// DefaultOptions are the documented defaults: port 8000, root /v1/odata/v4,
// a 64 MiB page cap, a 30 s budget, zstd and gzip on (br off), sequential
// requests per key, a $filter budget of 256, data queries capped below the
// pool size, 15 min per response body, keys cached 5 s, 20 failed key
// checks a minute per client address, 8 requests in flight per browser
// origin.
func DefaultOptions() Options {
	return Options{
		Addr:           "0.0.0.0:8000",
		Root:           "/v1/odata/v4",
		MaxPageBytes:   64 << 20,
		QueryTimeout:   30 * time.Second,
		StallTimeout:   60 * time.Second,
		Gzip:           true,
		Brotli:         false,
		Zstd:           true,
		Sequential:     true,
		FailOpen:       true,
		PaceWait:       10 * time.Second,
		PaceQueue:      8,
		PaceQueueTotal: 1024,
		SlotWait:       time.Second,
		StallPreempt:   500 * time.Millisecond,

		AccessLogPerSecond: 100,
		FilterBudget:       256,
		StreamTimeout:      15 * time.Minute,
		KeyCacheTTL:        5 * time.Second,
		KeyFailures:        20,
		KeyFailureWindow:   time.Minute,
		OriginMaxInFlight:  8,
	}
}

// forwardedHeader is ForwardedHeader with its default.
func (o Options) forwardedHeader() string {
	if o.ForwardedHeader == "" {
		return "X-Forwarded-For"
	}
	return o.ForwardedHeader
}

// KeyConns is how many connections of the store's pool a derived
// MaxQueries leaves to API key checks.
const KeyConns = 2

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Root == "" || !strings.HasPrefix(o.Root, "/") || strings.HasSuffix(o.Root, "/"):
		return fmt.Errorf("odata: Root must start with / and not end with one, got %q", o.Root)
	case o.MaxPageBytes < 1024:
		return fmt.Errorf("odata: MaxPageBytes must be at least 1024, got %d", o.MaxPageBytes)
	case o.QueryTimeout <= 0:
		return errors.New("odata: QueryTimeout must be positive")
	case o.StallTimeout <= 0:
		return errors.New("odata: StallTimeout must be positive")
	case o.StreamTimeout <= 0:
		return errors.New("odata: StreamTimeout must be positive")
	case o.FilterBudget < 0:
		return fmt.Errorf("odata: FilterBudget must not be negative (0: no budget), got %d", o.FilterBudget)
	case o.KeyCacheTTL < 0:
		return errors.New("odata: KeyCacheTTL must not be negative")
	case o.KeyFailures < 0 || (o.KeyFailures > 0 && o.KeyFailureWindow <= 0):
		return errors.New("odata: KeyFailures must not be negative, and KeyFailureWindow must be positive when it is set")
	case o.OriginMaxInFlight < 0:
		return errors.New("odata: OriginMaxInFlight must not be negative (0: no cap)")
	case o.SlotWait < 0:
		return fmt.Errorf("odata: SlotWait must not be negative, got %v", o.SlotWait)
	case o.StallPreempt <= 0:
		return fmt.Errorf("odata: StallPreempt must be positive, got %v", o.StallPreempt)
	case o.PaceWait < 0:
		return fmt.Errorf("odata: PaceWait must not be negative (0: refuse at once), got %v", o.PaceWait)
	case o.PaceWait > 0 && (o.PaceQueue < 1 || o.PaceQueueTotal < o.PaceQueue):
		return fmt.Errorf("odata: with PaceWait set, PaceQueue must be at least 1 and PaceQueueTotal at least PaceQueue, got %d and %d", o.PaceQueue, o.PaceQueueTotal)
	case !validHeaderName(o.ForwardedHeader):
		return fmt.Errorf("odata: ForwardedHeader %q is not a header name", o.ForwardedHeader)
	case o.AccessLog != nil && o.AccessLogPerSecond < 1:
		return fmt.Errorf("odata: AccessLogPerSecond must be at least 1 with an access log, got %d", o.AccessLogPerSecond)
	}
	if o.MetricsPath != "" && (!strings.HasPrefix(o.MetricsPath, "/") || o.MetricsPath == o.Root || strings.HasPrefix(o.MetricsPath, o.Root+"/")) {
		return fmt.Errorf("odata: MetricsPath must start with / and lie outside Root %q, got %q", o.Root, o.MetricsPath)
	}
	if o.PublicURL != "" {
		u, err := url.Parse(o.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("odata: PublicURL must be scheme://host[:port], got %q", o.PublicURL)
		}
	}
	for _, origin := range o.CORSOrigins {
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			return fmt.Errorf("odata: CORS origin must be scheme://host[:port], got %q", origin)
		}
	}
	return nil
}

// validHeaderName accepts "" (the default) and HTTP token characters.
func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
