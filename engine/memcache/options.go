package memcache

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/check"
	"github.com/sluicehq/sluice/internal/tlsclient"
)

// Options configures the memcache backend. Field names follow the MEMCACHE_*
// settings of the reference implementation.
type Options struct {
	// HostPorts are the memcached nodes (MEMCACHE_HOST_PORT).
	HostPorts []string
	// SRV is a record "_service._proto.name" to find the nodes (MEMCACHE_SRV);
	// exclusive with HostPorts.
	SRV string
	// SRVRefresh re-reads the SRV record this often; 0 never (MEMCACHE_SRV_REFRESH).
	SRVRefresh time.Duration
	// MaxIdleConns is the idle connections kept per node (MEMCACHE_MAX_IDLE_CONNS).
	MaxIdleConns int
	// TLS to the nodes, with an optional client certificate; TLSCACert is
	// added to the system roots (MEMCACHE_TLS*).
	TLS                         bool
	TLSCert, TLSKey, TLSCACert  string
	TLSSkipHostnameVerification bool
	// Timeout bounds every socket read and write, and dials.
	Timeout time.Duration

	// Workers apply the increments in the background.
	Workers int
	// QueueSize bounds the increments waiting for a worker; a full queue
	// makes Exec wait (back-pressure) until its context ends.
	QueueSize int
	// DrainTimeout bounds how long Close waits for queued increments.
	DrainTimeout time.Duration
	// HealthCheckInterval is how often the nodes are pinged so that Healthy
	// also follows reality without traffic.
	HealthCheckInterval time.Duration

	// Resolver looks up SRV; nil uses net.DefaultResolver.
	Resolver *net.Resolver
	// Now is the clock for absolute expirations; nil uses time.Now.
	Now func() time.Time
	// Logger receives background errors (failed increments, SRV refresh);
	// nil discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the reference's defaults plus sluice's pool sizes.
// HostPorts or SRV must still be set.
func DefaultOptions() Options {
	return Options{
		MaxIdleConns:        2,
		Timeout:             500 * time.Millisecond,
		Workers:             8,
		QueueSize:           4096,
		DrainTimeout:        5 * time.Second,
		HealthCheckInterval: time.Second,
	}
}

// EnsureDefaults fills the fields left nil (resolver stays nil for the
// default one): the clock and a logger that discards. It returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports every problem with o, joined.
func (o Options) Validate() error {
	var p check.Problems
	switch {
	case len(o.HostPorts) > 0 && o.SRV != "":
		p.Addf("Both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set")
	case len(o.HostPorts) == 0 && o.SRV == "":
		p.Addf("neither MEMCACHE_HOST_PORT nor MEMCACHE_SRV is set")
	}
	for _, hp := range o.HostPorts {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			p.Addf("memcache host %q: %w", hp, err)
		}
	}
	if o.SRV != "" {
		_, err := parseSRVName(o.SRV)
		p.Add(err)
	}
	p.NotNegative("memcache SRV refresh", o.SRVRefresh)
	p.AtLeast("memcache max idle connections", o.MaxIdleConns, 1)
	p.Positive("memcache timeout", o.Timeout)
	p.AtLeast("memcache workers", o.Workers, 1)
	p.AtLeast("memcache queue size", o.QueueSize, 1)
	p.Positive("memcache drain timeout", o.DrainTimeout)
	p.Positive("memcache health check interval", o.HealthCheckInterval)
	if err := tlsclient.CheckPair(o.TLSCert, o.TLSKey); err != nil {
		p.Addf("memcache %w", err)
	}
	return p.Err()
}

// srvName is a parsed "_service._proto.name".
type srvName struct{ service, proto, name string }

// parseSRVName checks the "_service._proto.name" shape the reference
// requires.
func parseSRVName(s string) (srvName, error) {
	bad := fmt.Errorf("memcache SRV %q is not of the form _service._proto.name", s)
	rest, ok := strings.CutPrefix(s, "_")
	if !ok {
		return srvName{}, bad
	}
	service, rest, ok := strings.Cut(rest, "._")
	if !ok || service == "" {
		return srvName{}, bad
	}
	proto, name, ok := strings.Cut(rest, ".")
	if !ok || proto == "" || strings.Trim(name, ".") == "" {
		return srvName{}, bad
	}
	for _, part := range []string{service, proto, name} {
		for i := 0; i < len(part); i++ {
			if c := part[i]; c <= ' ' || c == 0x7f {
				return srvName{}, bad
			}
		}
	}
	return srvName{service, proto, name}, nil
}
