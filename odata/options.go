package odata

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
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
	// request came over TLS or X-Forwarded-Proto says so.
	PublicURL string
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
	// Brotli answers br to clients that accept it (on by default: the
	// Python, JavaScript and shell clients advertise br, and brotli's level
	// 3 costs less CPU than gzip's default for a smaller page).
	Brotli bool
	// Zstd answers zstd to clients that accept it.
	Zstd bool
	// CORSOrigins are the browser origins (scheme://host[:port]) allowed to
	// call without a key; "*" is not accepted, origins are listed.
	CORSOrigins []string
	// Sequential refuses (429) a request while another of the same key or
	// origin is in flight.
	Sequential bool
	// FailOpen serves requests when the rate limiter fails (for example, a
	// remote rate limit service is unreachable) instead of answering 503.
	FailOpen bool
	// Logger receives request failures; nil discards them.
	Logger *slog.Logger
	// AccessLog receives one line per request (status, method, path and
	// query, caller as key id or origin — never the secret —, rows, bytes,
	// duration); nil: no access log.
	AccessLog *slog.Logger
	// AccessLogPerSecond bounds the access log: at most this many lines a
	// second on average (bursts of as many); the lines over it are counted
	// and the count is written on the next line as "suppressed".
	AccessLogPerSecond int
}

// DefaultOptions are the documented defaults: port 8000, root /v1/odata/v4,
// a 64 MiB page cap, a 30 s budget, br, zstd and gzip on, sequential
// requests per key.
func DefaultOptions() Options {
	return Options{
		Addr:         "0.0.0.0:8000",
		Root:         "/v1/odata/v4",
		MaxPageBytes: 64 << 20,
		QueryTimeout: 30 * time.Second,
		StallTimeout: 60 * time.Second,
		Gzip:         true,
		Brotli:       true,
		Zstd:         true,
		Sequential:   true,
		FailOpen:     true,

		AccessLogPerSecond: 100,
	}
}

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
	case o.AccessLog != nil && o.AccessLogPerSecond < 1:
		return fmt.Errorf("odata: AccessLogPerSecond must be at least 1 with an access log, got %d", o.AccessLogPerSecond)
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
