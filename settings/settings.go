package settings

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memcache"
	"github.com/sluicehq/sluice/engine/redis"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/transport/metrics"
	"github.com/sluicehq/sluice/transport/tlsreload"
	"github.com/sluicehq/sluice/transport/tracing"
	"github.com/sluicehq/sluice/transport/xds"
)

// Settings is everything the rate limit service reads from the environment,
// grouped by the part that uses it. Read it once with FromEnv.
type Settings struct {
	Listen  ListenSettings
	Log     LogSettings
	Config  ConfigSettings
	Limiter LimiterSettings
	Backend BackendSettings

	// Stats chooses the statistics sink (USE_STATSD, USE_PROMETHEUS, ...).
	Stats metrics.Settings
	// TLS is the gRPC server's TLS and mutual TLS (GRPC_SERVER_USE_TLS, ...).
	TLS tlsreload.Settings
	// XDS is the management server client of CONFIG_TYPE=GRPC_XDS_SOTW.
	XDS xds.Settings
	// Tracing is OTLP trace export (TRACING_*, OTEL_EXPORTER_OTLP_*).
	Tracing tracing.Settings
	// Runtime tunes the Go runtime of the process that serves.
	Runtime RuntimeSettings
}

// RuntimeSettings tune the Go runtime. The server does not apply them
// itself (they are process-wide); the command that runs it does.
type RuntimeSettings struct {
	// GCHeapFloorMiB keeps the collector from starting below this heap size
	// (SLUICE_GC_HEAP_FLOOR_MIB, 0 = off; see internal/gcfloor). The default
	// is DefaultGCHeapFloorMiB, or 0 when GOGC is set: an operator who chose
	// a GC policy keeps it.
	GCHeapFloorMiB int
}

// DefaultGCHeapFloorMiB: a decision allocates a few KiB and keeps almost
// nothing, so at GOGC=100 a busy server would collect dozens of times a
// second. A smaller floor leaves much of that work; a larger one makes a
// heap that outgrows the CPU caches at low load. The price is a resident
// size up to ~30 MiB larger.
const DefaultGCHeapFloorMiB = 32

// maxGCHeapFloorMiB (1 TiB) catches a value given in bytes instead of MiB.
const maxGCHeapFloorMiB = 1 << 20

// ListenSettings are the service's addresses and gRPC connection limits.
type ListenSettings struct {
	Host, DebugHost, GRPCHost string
	Port, DebugPort, GRPCPort int
	GRPCUDS                   string
	MaxConnectionAge          time.Duration
	MaxConnectionAgeGrace     time.Duration
	// GRPCStreamWorkers is how many goroutines serve RPCs and are kept
	// between them (SLUICE_GRPC_STREAM_WORKERS, 0 = a new goroutine per RPC,
	// as grpc-go does by default). A new goroutine grows its stack on every
	// decision; a kept worker has grown it once.
	GRPCStreamWorkers int
	// GRPCServer is which gRPC server serves the gRPC port
	// (SLUICE_GRPC_SERVER): GRPCServerNative (the default, also when empty) serves
	// ShouldRateLimit and the health service with the package h2grpc, at about
	// half grpc-go's CPU per call; GRPCServerGRPCGo is grpc-go's server.
	// Tracing and server options given by an embedding program always use
	// grpc-go's; TLS works with both.
	GRPCServer string
	// HTTPTimeouts bound the /json, debug and pull metrics connections.
	HTTPTimeouts HTTPTimeouts
	// GRPCLimits bound the gRPC port's connections, either server's
	// (SLUICE_GRPC_MAX_CONCURRENT_STREAMS, SLUICE_GRPC_IDLE_TIMEOUT,
	// SLUICE_GRPC_STALL_TIMEOUT).
	GRPCLimits GRPCLimits
	// MaxConnections caps the connections open at once on each port
	// (accept.go).
	MaxConnections MaxConnections
}

// DefaultGRPCStreamWorkers covers the calls in flight of a busy gateway
// fleet's connections; RPCs beyond it get a goroutine of their own.
const DefaultGRPCStreamWorkers = 128

// The gRPC servers ListenSettings.GRPCServer names.
const (
	GRPCServerNative = "native"
	GRPCServerGRPCGo = "grpc-go"
)

// HTTPTimeouts bound how long an HTTP client may hold a connection without
// making progress, so that slow or idle clients cannot pile up connections
// (SLUICE_HTTP_READ_HEADER_TIMEOUT, SLUICE_HTTP_READ_TIMEOUT,
// SLUICE_HTTP_IDLE_TIMEOUT). The defaults are the OData port's.
type HTTPTimeouts struct {
	// ReadHeader is the longest a client may take to send a request's headers.
	ReadHeader time.Duration
	// Read is the longest a client may take to send a whole request, body included.
	Read time.Duration
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration
}

// DefaultHTTPTimeouts are the OData port's limits.
func DefaultHTTPTimeouts() HTTPTimeouts {
	return HTTPTimeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Idle: 90 * time.Second}
}

// Validate reports a timeout that would turn the limit off or never let a request in.
func (t HTTPTimeouts) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"SLUICE_HTTP_READ_HEADER_TIMEOUT", t.ReadHeader}, {"SLUICE_HTTP_READ_TIMEOUT", t.Read}, {"SLUICE_HTTP_IDLE_TIMEOUT", t.Idle}} {
		if v.d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", v.name, v.d))
		}
	}
	if t.ReadHeader > t.Read && t.Read > 0 {
		errs = append(errs, fmt.Errorf("SLUICE_HTTP_READ_HEADER_TIMEOUT (%v) must not exceed SLUICE_HTTP_READ_TIMEOUT (%v)", t.ReadHeader, t.Read))
	}
	return errors.Join(errs...)
}

// Server is an http.Server for h with these timeouts. No write timeout: a
// CPU profile or trace from the debug port streams for as long as it was asked.
func (t HTTPTimeouts) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, IdleTimeout: t.Idle}
}

// HTTPAddr is the /json and /healthcheck address.
func (l ListenSettings) HTTPAddr() string { return joinHostPort(l.Host, l.Port) }

// DebugAddr is the debug server's address.
func (l ListenSettings) DebugAddr() string { return joinHostPort(l.DebugHost, l.DebugPort) }

// GRPCAddr is the gRPC address (unused when GRPCUDS is set).
func (l ListenSettings) GRPCAddr() string { return joinHostPort(l.GRPCHost, l.GRPCPort) }

func joinHostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		return fmt.Sprintf("[%s]:%d", h, p)
	}
	return fmt.Sprintf("%s:%d", h, p)
}

// LogSettings: LOG_LEVEL and LOG_FORMAT.
type LogSettings struct {
	Level  string
	Format string
	// RepeatInterval: a warning repeated during an outage (a failed
	// decision, a failed memcache increment) is logged once per interval
	// with a count (SLUICE_LOG_REPEAT_INTERVAL).
	RepeatInterval time.Duration
}

// ConfigSettings say where rules come from and how health depends on them.
type ConfigSettings struct {
	Type              string // FILE or GRPC_XDS_SOTW
	RuntimeRoot       string
	Subdirectory      string
	AppDirectory      string
	IgnoreDotFiles    bool
	WatchRoot         bool
	MergeDomains      bool
	ForceStart        bool // FORCE_START_WITHOUT_INITIAL_CONFIG
	HealthyWithConfig bool // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	// MaxBytes caps the rule files of one load together
	// (SLUICE_CONFIG_MAX_BYTES): a load beyond it fails and the rules in
	// use stay. ReadTimeout bounds the reading of one load
	// (SLUICE_CONFIG_READ_TIMEOUT). See files.go.
	MaxBytes    int64
	ReadTimeout time.Duration
}

// Validate checks the file source's bounds (when it is the source).
func (c ConfigSettings) Validate() error {
	if c.Type == "FILE" && (c.MaxBytes <= 0 || c.ReadTimeout <= 0) {
		return fmt.Errorf("SLUICE_CONFIG_MAX_BYTES (%d) and SLUICE_CONFIG_READ_TIMEOUT (%v) must be positive", c.MaxBytes, c.ReadTimeout)
	}
	return nil
}

// DefaultConfigMaxBytes is SLUICE_CONFIG_MAX_BYTES's default: about 45,000
// rules, parsed in a few seconds, well inside the 10 s drain.
const DefaultConfigMaxBytes = 4 << 20

// DefaultConfigReadTimeout is SLUICE_CONFIG_READ_TIMEOUT's default.
const DefaultConfigReadTimeout = 10 * time.Second

// LimiterSettings are the decision engine's options as the environment sets
// them (NEAR_LIMIT_RATIO, CACHE_KEY_PREFIX, ...; Timeout is
// SLUICE_BACKEND_TIMEOUT, the longest a decision waits for counters), plus
// what the server builds around the engine. NewServer adds the parts that
// are not settings (counter, statistics, clock, key validator, local cache).
type LimiterSettings struct {
	engine.Options
	LocalCacheSizeBytes int // LOCAL_CACHE_SIZE_IN_BYTES; 0: no local cache
	// SLUICE_SHARDS; 0 = 1 for network stores, 4 × GOMAXPROCS for memory.
	Shards      int
	MaxInFlight int // SLUICE_MAX_IN_FLIGHT: backend calls per shard; 0 = pool size ÷ shards, at most 4
	// StatsMaxDynamic bounds the statistics names requests create (unknown
	// domains, detailed_metric keys): SLUICE_STATS_MAX_DYNAMIC.
	StatsMaxDynamic int
	// Lease sizes the reservations of rules that count by lease
	// (SLUICE_COUNTING=lease, or counting: lease on a rule): SLUICE_LEASE_*.
	Lease lease.Options
	// Quota serves the Rate Limit Quota Service (SLUICE_RLQS_*).
	Quota quota.Options
}

// validate checks what the engine's own Validate does not.
func (l LimiterSettings) validate() error {
	var errs []error
	if err := l.Lease.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("SLUICE_LEASE_*: %w", err))
	}
	if err := l.Quota.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("SLUICE_RLQS_*: %w", err))
	}
	if l.LocalCacheSizeBytes < 0 {
		errs = append(errs, errors.New("LOCAL_CACHE_SIZE_IN_BYTES must not be negative"))
	}
	return errors.Join(errs...)
}

// BackendSettings choose and configure the counter store.
type BackendSettings struct {
	Type string // redis (default, as the reference), memcache or memory

	Redis RedisSettings
	// PerSecond sends rules with unit SECOND to RedisPerSecond (REDIS_PERSECOND).
	PerSecond      bool
	RedisPerSecond RedisSettings

	Memcache memcache.Options

	// Memory bounds the embedded backend (BACKEND_TYPE=memory).
	Memory MemorySettings
}

// MemorySettings bound the embedded backend: the bytes its counters may take
// (SLUICE_MEMORY_MAX_BYTES; then a new counter fails its request with 503),
// the longest cache key (SLUICE_MEMORY_MAX_KEY_BYTES; a longer one is a 400),
// and how often expired counters are dropped with no traffic
// (SLUICE_MEMORY_SWEEP_INTERVAL).
type MemorySettings struct {
	MaxBytes    int64
	MaxKeyBytes int
	SweepEvery  time.Duration
}

// DefaultMemoryMaxBytes is an eighth of the machine's memory, between 64 MiB
// and 1 GiB: a counter takes ~100 bytes, so even the floor holds over half a
// million live windows.
func DefaultMemoryMaxBytes() int64 {
	const lo, hi = 64 << 20, 1 << 30
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 256 << 20
	}
	return min(max(int64(si.Totalram)*int64(si.Unit)/8, lo), hi)
}

// RedisSettings are one Redis instance's client options plus the bounds of
// the shards' calls that keep the reference's pipeline variables meaningful.
type RedisSettings struct {
	Options redis.Options
	// Pipeline bounds the shards' calls to this instance: Window is
	// REDIS_PIPELINE_WINDOW, MaxKeys is REDIS_PIPELINE_LIMIT in keys (see
	// pipelineKeys).
	Pipeline actors.Pipeline
}

// pipelineKeys turns REDIS_PIPELINE_LIMIT, counted in commands (two per key:
// INCRBY and EXPIRE), into the keys the shards count. A key's commands always
// travel together, so a limit of 1 still lets one key through. 0 (no cap)
// and negative values (refused by Validate) are kept as they are.
func pipelineKeys(commands int) int {
	if commands <= 0 {
		return commands
	}
	return max(1, commands/2)
}

// Validate reports the first setting that cannot work, in the reference's words where it has them.
func (s Settings) Validate() error {
	var errs []error
	switch s.Config.Type {
	case "FILE", "GRPC_XDS_SOTW":
	default:
		//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
		errs = append(errs, fmt.Errorf("Invalid setting for ConfigType: %s", s.Config.Type))
	}
	switch s.Backend.Type {
	case "redis", "", "memcache", "memory":
	default:
		//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
		errs = append(errs, fmt.Errorf("Invalid setting for BackendType: %s", s.Backend.Type))
	}
	switch strings.ToLower(s.Log.Format) {
	case "text", "json", "":
	default:
		errs = append(errs, fmt.Errorf("LOG_FORMAT must be text or json, got %q", s.Log.Format))
	}
	if _, err := ParseLevel(s.Log.Level); err != nil {
		errs = append(errs, err)
	}
	for name, p := range map[string]int{"PORT": s.Listen.Port, "DEBUG_PORT": s.Listen.DebugPort, "GRPC_PORT": s.Listen.GRPCPort} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s must be a port number, got %d", name, p))
		}
	}
	if s.Log.RepeatInterval <= 0 {
		errs = append(errs, fmt.Errorf("SLUICE_LOG_REPEAT_INTERVAL must be positive, got %v", s.Log.RepeatInterval))
	}
	if err := errors.Join(s.Listen.HTTPTimeouts.Validate(), s.Listen.GRPCLimits.Validate()); err != nil {
		errs = append(errs, err)
	}
	// The engine's own check, the one NewService makes again.
	if err := s.Limiter.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Limiter.validate(); err != nil {
		errs = append(errs, err)
	}
	if s.Backend.Type == "redis" || s.Backend.Type == "" {
		if err := s.Backend.Redis.Options.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("REDIS_*: %w", err))
		}
		if s.Backend.PerSecond {
			if err := s.Backend.RedisPerSecond.Options.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("REDIS_PERSECOND_*: %w", err))
			}
		}
	}
	if m := s.Backend.Memory; s.Backend.Type == "memory" && (m.MaxBytes <= 0 || m.MaxKeyBytes <= 0 || m.SweepEvery <= 0) {
		errs = append(errs, fmt.Errorf("SLUICE_MEMORY_MAX_BYTES (%d), SLUICE_MEMORY_MAX_KEY_BYTES (%d) and SLUICE_MEMORY_SWEEP_INTERVAL (%v) must be positive",
			m.MaxBytes, m.MaxKeyBytes, m.SweepEvery))
	}
	if s.Backend.Type == "memcache" {
		if err := s.Backend.Memcache.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("MEMCACHE_*: %w", err))
		}
	}
	if s.Limiter.StatsMaxDynamic < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_STATS_MAX_DYNAMIC must not be negative, got %d", s.Limiter.StatsMaxDynamic))
	}
	if s.Listen.GRPCStreamWorkers < 0 || s.Listen.GRPCStreamWorkers > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("SLUICE_GRPC_STREAM_WORKERS (%d) must be between 0 and %d", s.Listen.GRPCStreamWorkers, uint32(math.MaxUint32)))
	}
	switch s.Listen.GRPCServer {
	case "", GRPCServerNative, GRPCServerGRPCGo:
	default:
		errs = append(errs, fmt.Errorf("SLUICE_GRPC_SERVER is %q; it must be %q or %q", s.Listen.GRPCServer, GRPCServerNative, GRPCServerGRPCGo))
	}
	if f := s.Runtime.GCHeapFloorMiB; f < 0 || f > maxGCHeapFloorMiB {
		errs = append(errs, fmt.Errorf("SLUICE_GC_HEAP_FLOOR_MIB (%d) must be between 0 (off) and %d", f, maxGCHeapFloorMiB))
	}
	if s.Limiter.Shards < 0 || s.Limiter.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_SHARDS (%d) and SLUICE_MAX_IN_FLIGHT (%d) must not be negative", s.Limiter.Shards, s.Limiter.MaxInFlight))
	}
	errs = append(errs, s.validateOps()...)
	return errors.Join(errs...)
}

// Operations settings: statistics sinks, xDS, tracing and gRPC TLS, each a
// group owned by its own package.

func (s Settings) validateOps() []error {
	var errs []error
	if err := s.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Stats.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.Config.Type == "GRPC_XDS_SOTW" {
		if err := s.XDS.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}
