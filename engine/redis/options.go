package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/check"
	"github.com/sluicehq/sluice/internal/tlsclient"
)

// Options configures the Redis backend. Field names follow the REDIS_*
// settings of the reference implementation.
type Options struct {
	// Type is single, sentinel or cluster (case-insensitive). REDIS_TYPE.
	Type string
	// SocketType is tcp or unix; it applies to single only, sentinel and
	// cluster always use tcp, as in the reference. REDIS_SOCKET_TYPE.
	SocketType string
	// URL is host:port (or a socket path) for single;
	// "<master name>,<sentinel1>,...,<sentinelN>" for sentinel; a comma list
	// of seed nodes for cluster. Addresses may be written redis://user:pass@host:port,
	// in which case the user info is used when Auth (or, for sentinels,
	// SentinelAuth) is empty. REDIS_URL.
	URL string
	// PoolSize is the number of connections per node. REDIS_POOL_SIZE.
	PoolSize int
	// Auth is "password" or "user:password" for the data nodes. REDIS_AUTH.
	Auth string
	// SentinelAuth is the same for the sentinels themselves. REDIS_SENTINEL_AUTH.
	SentinelAuth string
	// TLS enables TLS to every node (and sentinel). REDIS_TLS.
	TLS bool
	// TLSCert and TLSKey are an optional client certificate; TLSCACert is
	// added to the system roots. REDIS_TLS_CLIENT_CERT/_KEY/_CACERT.
	TLSCert, TLSKey, TLSCACert string
	// TLSSkipHostnameVerification still verifies the chain but ignores the
	// name in the certificate. REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
	TLSSkipHostnameVerification bool
	// DialTimeout bounds each connection attempt. REDIS_TIMEOUT.
	DialTimeout time.Duration
	// HealthCheckActiveConnection makes Healthy follow the number of live
	// connections. REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.
	HealthCheckActiveConnection bool
	// HealthCheckInterval is how often the backend pings Redis while
	// HealthCheckActiveConnection is on, so that dead idle connections are
	// noticed and a recovered server is reconnected without traffic.
	HealthCheckInterval time.Duration
	// Startup retry: the first PING is retried with exponential backoff
	// (factor 2, jitter) from StartupInitialInterval up to
	// StartupMaxInterval; StartupMaxElapsed 0 retries until the context ends.
	// REDIS_STARTUP_INITIAL_INTERVAL / _MAX_INTERVAL / _MAX_ELAPSED_TIME.
	StartupInitialInterval, StartupMaxInterval, StartupMaxElapsed time.Duration
	// OnStartupFailure, if set, is told of the first failed PING at start
	// (the address it tried, masked, and the error), once: the retries
	// after it are quiet, so that whoever starts the service can say once
	// what to do about it.
	OnStartupFailure func(addr string, err error)
}

// DefaultOptions returns the reference implementation's defaults.
func DefaultOptions() Options {
	return Options{
		Type:                   "single",
		SocketType:             "unix",
		URL:                    "/var/run/nutcracker/ratelimit.sock",
		PoolSize:               10,
		DialTimeout:            10 * time.Second,
		HealthCheckInterval:    time.Second,
		StartupInitialInterval: time.Second,
		StartupMaxInterval:     30 * time.Second,
	}
}

const (
	typeSingle   = "single"
	typeSentinel = "sentinel"
	typeCluster  = "cluster"
)

// sentinelFormatErr is the reference's text for a sentinel URL without
// sentinels.
const sentinelFormatErr = "Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>"

// Validate reports every problem with o, joined.
func (o Options) Validate() error {
	var p check.Problems
	typ := strings.ToLower(o.Type)
	switch typ {
	case typeSingle, typeSentinel, typeCluster:
	default:
		p.Addf("Unrecognized redis type %s", o.Type)
	}
	if typ == typeSingle {
		switch strings.ToLower(o.SocketType) {
		case "tcp", "unix":
		default:
			p.Addf("Unrecognized redis socket type %q: want tcp or unix", o.SocketType)
		}
	}
	if strings.TrimSpace(o.URL) == "" {
		p.Addf("redis URL is empty")
	} else {
		_, err := o.endpoints()
		p.Add(err)
	}
	p.AtLeast("redis pool size", o.PoolSize, 1)
	p.NotNegative("redis dial timeout", o.DialTimeout)
	if o.HealthCheckActiveConnection {
		p.Positive("redis health check interval", o.HealthCheckInterval)
	}
	p.Positive("redis startup initial interval", o.StartupInitialInterval)
	if o.StartupMaxInterval < o.StartupInitialInterval {
		p.Addf("redis startup max interval %s is below the initial interval %s", o.StartupMaxInterval, o.StartupInitialInterval)
	}
	p.NotNegative("redis startup max elapsed time", o.StartupMaxElapsed)
	if err := tlsclient.CheckPair(o.TLSCert, o.TLSKey); err != nil {
		p.Addf("redis %w", err)
	}
	return p.Err()
}

// endpoint is one parsed address.
type endpoint struct {
	addr     string // host:port or socket path
	user     string
	password string
	hasAuth  bool
	db       int
}

// endpointSet is the URL split by type.
type endpointSet struct {
	masterName string
	nodes      []endpoint // single: one; cluster: seeds; sentinel: sentinels
}

func (o Options) endpoints() (endpointSet, error) {
	parts := strings.Split(o.URL, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	var set endpointSet
	switch strings.ToLower(o.Type) {
	case typeSentinel:
		if len(parts) < 2 {
			//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
			return set, errors.New(sentinelFormatErr)
		}
		set.masterName, parts = parts[0], parts[1:]
		if set.masterName == "" {
			//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
			return set, errors.New(sentinelFormatErr)
		}
	case typeSingle:
		if len(parts) != 1 {
			return set, fmt.Errorf("redis type single takes one address, got %d in %q", len(parts), maskURL(o.URL))
		}
	}
	unix := strings.ToLower(o.Type) == typeSingle && strings.ToLower(o.SocketType) == "unix"
	for _, p := range parts {
		ep, err := parseEndpoint(p, unix)
		if err != nil {
			return set, err
		}
		set.nodes = append(set.nodes, ep)
	}
	return set, nil
}

// parseEndpoint accepts host:port, a socket path (unix), or
// redis://[user[:password]@]host:port[/db].
func parseEndpoint(s string, unix bool) (endpoint, error) {
	if s == "" {
		return endpoint{}, errors.New("redis URL has an empty address")
	}
	if rest, ok := strings.CutPrefix(s, "redis://"); ok {
		u, err := url.Parse("redis://" + rest)
		if err != nil {
			return endpoint{}, fmt.Errorf("redis address %q: %w", maskURL(s), err)
		}
		ep := endpoint{addr: u.Host}
		if u.User != nil {
			ep.hasAuth = true
			ep.user = u.User.Username()
			ep.password, _ = u.User.Password()
			if _, ok := u.User.Password(); !ok {
				// redis://secret@host means a password, as for REDIS_AUTH.
				ep.user, ep.password = "", u.User.Username()
			}
		}
		if db := strings.Trim(u.Path, "/"); db != "" {
			n, err := strconv.Atoi(db)
			if err != nil || n < 0 {
				return endpoint{}, fmt.Errorf("redis address %q: database %q is not a number", maskURL(s), db)
			}
			ep.db = n
		}
		s = ep.addr
		if _, _, err := net.SplitHostPort(s); err != nil {
			return endpoint{}, fmt.Errorf("redis address %q: %w", maskURL(ep.addr), err)
		}
		return ep, nil
	}
	if unix {
		return endpoint{addr: s}, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return endpoint{}, fmt.Errorf("redis address %q: %w", s, err)
	}
	return endpoint{addr: s}, nil
}

// splitAuth turns "password" or "user:password" into its parts.
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// maskURL hides credentials of redis:// addresses in messages, like the
// reference: redis://user:pass@host becomes redis://*****@host.
func maskURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		at := strings.LastIndexByte(p, '@')
		if at >= 0 && strings.HasPrefix(p, "redis://") {
			parts[i] = "redis://*****@" + p[at+1:]
		}
	}
	return strings.Join(parts, ",")
}
