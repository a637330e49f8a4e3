package settings

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memcache"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/redis"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/transport/metrics"
	"github.com/sluicehq/sluice/transport/tlsreload"
	"github.com/sluicehq/sluice/transport/tracing"
	"github.com/sluicehq/sluice/transport/xds"
)

// aliasPrefixes pair the upstream variable names with the spec's neutral ones.
// Either spelling works; both set to different values is an error.
var aliasPrefixes = [][2]string{
	{"REDIS_", "KVSTORE_"},
	{"MEMCACHE_", "MCSTORE_"},
	{"USE_PROMETHEUS", "USE_PULLMETRICS"},
	{"PROMETHEUS_", "PULLMETRICS_"},
	{"USE_DOG_STATSD_MOGRIFIERS", "TAGGED_STATSD_MOGRIFIERS"},
	{"USE_DOG_STATSD", "USE_TAGGED_STATSD"},
	{"DOG_STATSD_MOGRIFIER_", "TAGGED_STATSD_MOGRIFIERS_"},
}

// aliasOf returns the other spelling of an upstream name, or "".
func aliasOf(name string) string {
	for _, p := range aliasPrefixes {
		if strings.HasPrefix(name, p[0]) {
			return p[1] + strings.TrimPrefix(name, p[0])
		}
	}
	return ""
}

// env reads variables with defaults and remembers the first error, so a
// settings reader can read everything and report once.
type env struct {
	lookup func(string) (string, bool)
	err    error
}

// newEnv reads from lookup (os.LookupEnv at the edge, a map in tests).
func newEnv(lookup func(string) (string, bool)) *env { return &env{lookup: lookup} }

// FromMap is a lookup over a map, for tests and examples.
func FromMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Err is the first problem met.
func (e *env) Err() error { return e.err }

func (e *env) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// Lookup returns the value under either spelling of name (name is the upstream spelling).
func (e *env) Lookup(name string) (string, bool) {
	v, ok := e.lookup(name)
	alias := aliasOf(name)
	if alias == "" {
		return v, ok
	}
	av, aok := e.lookup(alias)
	switch {
	case ok && aok && v != av:
		e.fail(fmt.Errorf("environment: %s=%q and %s=%q are both set and differ; set one of them", name, v, alias, av))
		return v, true
	case aok && !ok:
		return av, true
	}
	return v, ok
}

func (e *env) String(name, def string) string {
	if v, ok := e.Lookup(name); ok {
		return v
	}
	return def
}

// parse reads name with conv; unset or empty is def, a value conv refuses
// is an error saying what the value should be (want).
func parse[T any](e *env, name string, def T, want string, conv func(string) (T, error)) T {
	v, ok := e.Lookup(name)
	if !ok || v == "" {
		return def
	}
	x, err := conv(v)
	if err != nil {
		e.fail(fmt.Errorf("environment: %s=%q is not %s", name, v, want))
		return def
	}
	return x
}

func (e *env) Bool(name string, def bool) bool {
	return parse(e, name, def, "a boolean (true or false)", strconv.ParseBool)
}

func (e *env) Int(name string, def int) int {
	return parse(e, name, def, "an integer", strconv.Atoi)
}

func (e *env) Float32(name string, def float32) float32 {
	return parse(e, name, def, "a number", func(v string) (float32, error) {
		f, err := strconv.ParseFloat(v, 32)
		return float32(f), err
	})
}

// Duration accepts Go durations ("1s", "500ms"); a bare integer is seconds, as
// several of the reference's variables are documented in seconds.
func (e *env) Duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, "a duration (like 10s or 1m)", func(v string) (time.Duration, error) {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Duration(n) * time.Second, nil
		}
		return time.ParseDuration(v)
	})
}

// Map reads "k1:v1,k2:v2" (EXTRA_TAGS, additional headers).
func (e *env) Map(name string) map[string]string {
	v, ok := e.Lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		k, val, found := strings.Cut(pair, ":")
		if !found || strings.TrimSpace(k) == "" {
			e.fail(fmt.Errorf("environment: %s: %q is not a key:value pair", name, pair))
			return nil
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out
}

// List reads a comma-separated list, dropping empty items.
func (e *env) List(name string) []string {
	v, _ := e.Lookup(name)
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// FromEnv reads every setting, with the reference's defaults.
func FromEnv(lookup func(string) (string, bool)) (Settings, error) {
	e := newEnv(lookup)
	var s Settings
	s.Listen = ListenSettings{
		Host:                  e.String("HOST", "0.0.0.0"),
		Port:                  e.Int("PORT", 8080),
		DebugHost:             e.String("DEBUG_HOST", "0.0.0.0"),
		DebugPort:             e.Int("DEBUG_PORT", 6070),
		GRPCHost:              e.String("GRPC_HOST", "0.0.0.0"),
		GRPCPort:              e.Int("GRPC_PORT", 8081),
		GRPCUDS:               e.String("GRPC_UDS", ""),
		MaxConnectionAge:      e.Duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		MaxConnectionAgeGrace: e.Duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		GRPCStreamWorkers:     e.Int("SLUICE_GRPC_STREAM_WORKERS", DefaultGRPCStreamWorkers),
		GRPCServer:            e.String("SLUICE_GRPC_SERVER", GRPCServerNative),
	}
	s.Listen.HTTPTimeouts, s.Listen.GRPCLimits = connLimitsFromEnv(e)
	s.Listen.MaxConnections = maxConnectionsFromEnv(e)
	floor := DefaultGCHeapFloorMiB
	if _, ok := e.Lookup("GOGC"); ok {
		floor = 0
	}
	s.Runtime = RuntimeSettings{GCHeapFloorMiB: e.Int("SLUICE_GC_HEAP_FLOOR_MIB", floor)}
	s.Log = LogSettings{Level: e.String("LOG_LEVEL", "WARN"), Format: e.String("LOG_FORMAT", "text"),
		RepeatInterval: e.Duration("SLUICE_LOG_REPEAT_INTERVAL", ratelog.DefaultInterval)}
	s.Config = configFromEnv(e)
	eo := engine.DefaultOptions()
	eo.ExpirationJitterMax = time.Duration(e.Int("EXPIRATION_JITTER_MAX_SECONDS", int(eo.ExpirationJitterMax/time.Second))) * time.Second
	eo.NearLimitRatio = e.Float32("NEAR_LIMIT_RATIO", eo.NearLimitRatio)
	eo.CacheKeyPrefix = e.String("CACHE_KEY_PREFIX", "")
	eo.StopIncrementOnLimit = e.Bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	eo.Headers = engine.HeaderOptions{
		Enabled:   e.Bool("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		Limit:     e.String("LIMIT_LIMIT_HEADER", eo.Headers.Limit),
		Remaining: e.String("LIMIT_REMAINING_HEADER", eo.Headers.Remaining),
		Reset:     e.String("LIMIT_RESET_HEADER", eo.Headers.Reset),
	}
	eo.ShadowMode = e.Bool("SHADOW_MODE", false)
	eo.QuotaMode = e.Bool("QUOTA_MODE", false)
	eo.DynamicMetadata = e.Bool("RESPONSE_DYNAMIC_METADATA", false)
	eo.Timeout = e.Duration("SLUICE_BACKEND_TIMEOUT", eo.Timeout)
	eo.Counting = countingFromEnv(e)
	s.Limiter = LimiterSettings{
		Options:             eo,
		LocalCacheSizeBytes: e.Int("LOCAL_CACHE_SIZE_IN_BYTES", 0),
		StatsMaxDynamic:     e.Int("SLUICE_STATS_MAX_DYNAMIC", stats.DefaultMaxDynamic),
		Shards:              e.Int("SLUICE_SHARDS", 0),
		MaxInFlight:         e.Int("SLUICE_MAX_IN_FLIGHT", 0),
	}
	s.Limiter.Lease, s.Limiter.Quota = leaseFromEnv(e), quotaFromEnv(e)
	s.Backend = BackendSettings{Type: strings.ToLower(e.String("BACKEND_TYPE", "redis"))}
	s.Backend.Memory = MemorySettings{
		MaxBytes:    int64(e.Int("SLUICE_MEMORY_MAX_BYTES", int(DefaultMemoryMaxBytes()))),
		MaxKeyBytes: e.Int("SLUICE_MEMORY_MAX_KEY_BYTES", memory.DefaultMaxKeyBytes),
		SweepEvery:  e.Duration("SLUICE_MEMORY_SWEEP_INTERVAL", 10*time.Second),
	}
	if s.Limiter.Quota.MaxReporters == 0 {
		// The quota service's buckets may take a quarter of the memory
		// cap; the counters have the rest, and both are charged to it.
		s.Limiter.Quota.MaxReporters = min(quota.MaxReportersIn(s.Backend.Memory.MaxBytes/4), 1_000_000)
	}
	s.Backend.Redis = redisFromEnv(e, "REDIS_", nil)
	s.Backend.PerSecond = e.Bool("REDIS_PERSECOND", false)
	s.Backend.RedisPerSecond = redisFromEnv(e, "REDIS_PERSECOND_", &s.Backend.Redis.Options)
	s.Backend.Memcache = memcacheFromEnv(e)
	readOpsSettings(e, &s)
	if err := e.Err(); err != nil {
		return Settings{}, err
	}
	return s, s.Validate()
}

// connLimitsFromEnv reads what bounds the HTTP ports' and the gRPC port's
// connections.
func connLimitsFromEnv(e *env) (HTTPTimeouts, GRPCLimits) {
	ht, gl := DefaultHTTPTimeouts(), DefaultGRPCLimits()
	return HTTPTimeouts{
			ReadHeader: e.Duration("SLUICE_HTTP_READ_HEADER_TIMEOUT", ht.ReadHeader),
			Read:       e.Duration("SLUICE_HTTP_READ_TIMEOUT", ht.Read),
			Idle:       e.Duration("SLUICE_HTTP_IDLE_TIMEOUT", ht.Idle),
		}, GRPCLimits{
			MaxConcurrentStreams: e.Int("SLUICE_GRPC_MAX_CONCURRENT_STREAMS", gl.MaxConcurrentStreams),
			IdleTimeout:          e.Duration("SLUICE_GRPC_IDLE_TIMEOUT", gl.IdleTimeout),
			StallTimeout:         e.Duration("SLUICE_GRPC_STALL_TIMEOUT", gl.StallTimeout),
		}
}

// configFromEnv reads the rule source's settings.
func configFromEnv(e *env) ConfigSettings {
	return ConfigSettings{
		Type:              strings.ToUpper(e.String("CONFIG_TYPE", "FILE")),
		RuntimeRoot:       e.String("RUNTIME_ROOT", "/srv/runtime_data/current"),
		Subdirectory:      e.String("RUNTIME_SUBDIRECTORY", ""),
		AppDirectory:      e.String("RUNTIME_APPDIRECTORY", "config"),
		IgnoreDotFiles:    e.Bool("RUNTIME_IGNOREDOTFILES", false),
		WatchRoot:         e.Bool("RUNTIME_WATCH_ROOT", true),
		MergeDomains:      e.Bool("MERGE_DOMAIN_CONFIG", false),
		ForceStart:        e.Bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		HealthyWithConfig: e.Bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		MaxBytes:          int64(e.Int("SLUICE_CONFIG_MAX_BYTES", DefaultConfigMaxBytes)),
		ReadTimeout:       e.Duration("SLUICE_CONFIG_READ_TIMEOUT", DefaultConfigReadTimeout),
	}
}

// redisFromEnv reads one instance's REDIS_* (or REDIS_PERSECOND_*) variables.
// The per-second instance shares the main one's TLS files and startup
// backoff unless it names its own.
func redisFromEnv(e *env, p string, main *redis.Options) RedisSettings {
	def := redis.DefaultOptions()
	if p == "REDIS_PERSECOND_" {
		def.URL = "/var/run/nutcracker/ratelimitpersecond.sock"
		def.TLSCert, def.TLSKey, def.TLSCACert = main.TLSCert, main.TLSKey, main.TLSCACert
		def.TLSSkipHostnameVerification = main.TLSSkipHostnameVerification
		def.StartupInitialInterval, def.StartupMaxInterval, def.StartupMaxElapsed = main.StartupInitialInterval, main.StartupMaxInterval, main.StartupMaxElapsed
		def.HealthCheckActiveConnection = main.HealthCheckActiveConnection
	}
	o := redis.Options{
		Type:                        strings.ToLower(e.String(p+"TYPE", def.Type)),
		SocketType:                  e.String(p+"SOCKET_TYPE", def.SocketType),
		URL:                         e.String(p+"URL", def.URL),
		PoolSize:                    e.Int(p+"POOL_SIZE", def.PoolSize),
		Auth:                        e.String(p+"AUTH", ""),
		SentinelAuth:                e.String(p+"SENTINEL_AUTH", ""),
		TLS:                         e.Bool(p+"TLS", false),
		TLSCert:                     e.String(p+"TLS_CLIENT_CERT", def.TLSCert),
		TLSKey:                      e.String(p+"TLS_CLIENT_KEY", def.TLSKey),
		TLSCACert:                   e.String(p+"TLS_CACERT", def.TLSCACert),
		TLSSkipHostnameVerification: e.Bool(p+"TLS_SKIP_HOSTNAME_VERIFICATION", def.TLSSkipHostnameVerification),
		DialTimeout:                 e.Duration(p+"TIMEOUT", def.DialTimeout),
		HealthCheckActiveConnection: e.Bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", def.HealthCheckActiveConnection),
		HealthCheckInterval:         def.HealthCheckInterval,
		StartupInitialInterval:      e.Duration("REDIS_STARTUP_INITIAL_INTERVAL", def.StartupInitialInterval),
		StartupMaxInterval:          e.Duration("REDIS_STARTUP_MAX_INTERVAL", def.StartupMaxInterval),
		StartupMaxElapsed:           e.Duration("REDIS_STARTUP_MAX_ELAPSED_TIME", def.StartupMaxElapsed),
	}
	rs := RedisSettings{Options: o, Pipeline: actors.Pipeline{
		Window:  e.Duration(p+"PIPELINE_WINDOW", 0),
		MaxKeys: pipelineKeys(e.Int(p+"PIPELINE_LIMIT", 0)),
	}}
	if rs.Pipeline.MaxKeys < 0 {
		e.fail(fmt.Errorf("%sPIPELINE_LIMIT must not be negative (0: no cap), got %d", p, rs.Pipeline.MaxKeys))
	}
	if rs.Pipeline.Window < 0 {
		e.fail(fmt.Errorf("%sPIPELINE_WINDOW must not be negative (0: no window), got %v", p, rs.Pipeline.Window))
	}
	switch v := strings.ToUpper(e.String(p+"POOL_ON_EMPTY_BEHAVIOR", "WAIT")); v {
	case "WAIT", "":
	case "CREATE", "ERROR":
		e.fail(fmt.Errorf("%sPOOL_ON_EMPTY_BEHAVIOR=%s is not supported: sluice's pool waits for a free connection (WAIT)", p, v))
	}
	if n := e.Int(p+"CLUSTER_PIPELINE_PARALLELISM", 1); n < 0 {
		e.fail(fmt.Errorf("redis cluster pipeline parallelism must be >= 0"))
	}
	return rs
}

// memcacheFromEnv reads the MEMCACHE_* (MCSTORE_*) variables.
func memcacheFromEnv(e *env) memcache.Options {
	o := memcache.DefaultOptions()
	o.HostPorts = e.List("MEMCACHE_HOST_PORT")
	o.SRV = e.String("MEMCACHE_SRV", "")
	o.SRVRefresh = e.Duration("MEMCACHE_SRV_REFRESH", 0)
	o.MaxIdleConns = e.Int("MEMCACHE_MAX_IDLE_CONNS", o.MaxIdleConns)
	o.TLS = e.Bool("MEMCACHE_TLS", false)
	o.TLSCert = e.String("MEMCACHE_TLS_CLIENT_CERT", "")
	o.TLSKey = e.String("MEMCACHE_TLS_CLIENT_KEY", "")
	o.TLSCACert = e.String("MEMCACHE_TLS_CACERT", "")
	o.TLSSkipHostnameVerification = e.Bool("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false)
	return o
}

// countingFromEnv reads SLUICE_COUNTING, the counting of rules that name none.
func countingFromEnv(e *env) engine.Counting {
	counting := strings.ToLower(e.String("SLUICE_COUNTING", "exact"))
	c, ok := engine.ParseCounting(counting)
	if !ok || c == engine.CountDefault {
		e.fail(fmt.Errorf("SLUICE_COUNTING must be exact or lease, got %q", counting))
	}
	return c
}

// leaseFromEnv reads the quota lease knobs (SLUICE_COUNTING=lease).
func leaseFromEnv(e *env) lease.Options {
	d := lease.DefaultOptions()
	return lease.Options{
		Horizon:       e.Duration("SLUICE_LEASE_HORIZON", d.Horizon),
		HeadroomShare: uint64(max(e.Int("SLUICE_LEASE_HEADROOM_SHARE", int(d.HeadroomShare)), 0)),
		BlockShare:    uint64(max(e.Int("SLUICE_LEASE_BLOCK_SHARE", int(d.BlockShare)), 0)),
		MaxBlock:      uint64(max(e.Int("SLUICE_LEASE_MAX_BLOCK", int(d.MaxBlock)), 0)),
		Sweep:         e.Duration("SLUICE_LEASE_SWEEP_INTERVAL", d.Sweep),
		IdleAfter:     e.Duration("SLUICE_LEASE_IDLE", d.IdleAfter),
	}
}

func readOpsSettings(e *env, s *Settings) {
	s.Stats = statsFromEnv(e)
	s.TLS = tlsreload.Settings{
		Enabled:      e.Bool("GRPC_SERVER_USE_TLS", false),
		CertFile:     e.String("GRPC_SERVER_TLS_CERT", ""),
		KeyFile:      e.String("GRPC_SERVER_TLS_KEY", ""),
		ClientCAFile: e.String("GRPC_CLIENT_TLS_CACERT", ""),
		ClientSAN:    e.String("GRPC_CLIENT_TLS_SAN", ""),
	}
	s.XDS = xdsFromEnv(e)
	s.Tracing = tracingFromEnv(e)
}

// statsFromEnv reads the reference's stats variables (gostats, statsd_exporter, godogstats).
func statsFromEnv(e *env) metrics.Settings {
	d := metrics.DefaultSettings()
	st := metrics.Settings{
		Disabled:               e.Bool("DISABLE_STATS", false),
		UseStatsd:              e.Bool("USE_STATSD", d.UseStatsd),
		StatsdHost:             e.String("STATSD_HOST", d.StatsdHost),
		StatsdPort:             e.Int("STATSD_PORT", d.StatsdPort),
		UseTagged:              e.Bool("USE_DOG_STATSD", false),
		UsePull:                e.Bool("USE_PROMETHEUS", false),
		PullAddr:               e.String("PROMETHEUS_ADDR", d.PullAddr),
		PullPath:               e.String("PROMETHEUS_PATH", d.PullPath),
		PullMapperFile:         e.String("PROMETHEUS_MAPPER_YAML", ""),
		PullMaxConnections:     e.Int("SLUICE_METRICS_MAX_CONNECTIONS", 0),
		PullResponseTimeMillis: e.Bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false),
		ExtraTags:              e.Map("EXTRA_TAGS"),
		FlushInterval:          e.Duration("STATS_FLUSH_INTERVAL", d.FlushInterval),
	}
	for _, name := range e.List("USE_DOG_STATSD_MOGRIFIERS") {
		p := "DOG_STATSD_MOGRIFIER_" + name + "_"
		st.Mogrifiers = append(st.Mogrifiers, metrics.Mogrifier{
			Label:   name,
			Pattern: e.String(p+"PATTERN", ""),
			NewName: e.String(p+"NAME", ""),
			Tags:    e.Map(p + "TAGS"),
		})
	}
	return st
}

// xdsFromEnv reads the CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables.
func xdsFromEnv(e *env) xds.Settings {
	d := xds.DefaultSettings()
	md, err := xds.ParseNodeMetadata(e.String("CONFIG_GRPC_XDS_NODE_METADATA", ""))
	if err != nil {
		e.fail(err)
	}
	return xds.Settings{
		NodeID:               e.String("CONFIG_GRPC_XDS_NODE_ID", d.NodeID),
		NodeMetadata:         md,
		ServerURL:            e.String("CONFIG_GRPC_XDS_SERVER_URL", d.ServerURL),
		ConnectRetryInterval: e.Duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", d.ConnectRetryInterval),
		Headers:              e.Map("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"),
		UseTLS:               e.Bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
		ClientCertFile:       e.String("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
		ClientKeyFile:        e.String("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
		ServerCAFile:         e.String("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
		ServerSAN:            e.String("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
		BackoffInitial:       e.Duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", d.BackoffInitial),
		BackoffMax:           e.Duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", d.BackoffMax),
		BackoffRandomFactor:  float64(e.Float32("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", float32(d.BackoffRandomFactor))),
		BackoffJitter:        e.Bool("XDS_CLIENT_BACKOFF_JITTER", d.BackoffJitter),
		MaxRecvMsgSize:       e.Int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0),
	}
}

// tracingFromEnv reads TRACING_* and the standard OTLP exporter variables;
// the traces-specific OTEL_EXPORTER_OTLP_TRACES_* win over the general ones.
func tracingFromEnv(e *env) tracing.Settings {
	d := tracing.DefaultSettings()
	otlp := func(name string) string {
		if v := e.String("OTEL_EXPORTER_OTLP_TRACES_"+name, ""); v != "" {
			return v
		}
		return e.String("OTEL_EXPORTER_OTLP_"+name, "")
	}
	t := tracing.Settings{
		Enabled:           e.Bool("TRACING_ENABLED", false),
		Protocol:          strings.ToLower(e.String("TRACING_EXPORTER_PROTOCOL", d.Protocol)),
		ServiceName:       e.String("TRACING_SERVICE_NAME", d.ServiceName),
		ServiceNamespace:  e.String("TRACING_SERVICE_NAMESPACE", ""),
		ServiceInstanceID: e.String("TRACING_SERVICE_INSTANCE_ID", ""),
		SamplingRate:      float64(e.Float32("TRACING_SAMPLING_RATE", float32(d.SamplingRate))),
		Endpoint:          e.String("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
		TracesEndpoint:    e.String("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
		Timeout:           d.Timeout,
		Compression:       strings.ToLower(otlp("COMPRESSION")),
	}
	if v := otlp("INSECURE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.fail(fmt.Errorf("environment: OTEL_EXPORTER_OTLP_INSECURE=%q is not a boolean", v))
		}
		t.Insecure = b
	}
	if v := otlp("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil {
			e.fail(fmt.Errorf("environment: OTEL_EXPORTER_OTLP_TIMEOUT=%q is not a number of milliseconds", v))
		}
		t.Timeout = time.Duration(ms) * time.Millisecond
	}
	h, err := tracing.ParseHeaders(otlp("HEADERS"))
	if err != nil {
		e.fail(err)
	}
	t.Headers = h
	return t
}

// quotaFromEnv reads the Rate Limit Quota Service's knobs (SLUICE_RLQS_*).
func quotaFromEnv(e *env) quota.Options {
	o := quota.DefaultOptions()
	a := &o.Alloc
	a.Floor = float64(e.Float32("SLUICE_RLQS_FLOOR", float32(a.Floor)))
	a.Spare = float64(e.Float32("SLUICE_RLQS_SPARE", float32(a.Spare)))
	a.Headroom = float64(e.Float32("SLUICE_RLQS_HEADROOM", float32(a.Headroom)))
	a.FirstShare = float64(e.Float32("SLUICE_RLQS_FIRST_SHARE", float32(a.FirstShare)))
	a.Hysteresis = float64(e.Float32("SLUICE_RLQS_HYSTERESIS", float32(a.Hysteresis)))
	a.Burst = e.Duration("SLUICE_RLQS_BURST", a.Burst)
	a.MaxFill = e.Duration("SLUICE_RLQS_MAX_FILL_INTERVAL", a.MaxFill)
	a.ReportPeriod = e.Duration("SLUICE_RLQS_REPORT_PERIOD", a.ReportPeriod)
	a.Delivery = e.Duration("SLUICE_RLQS_DELIVERY", a.Delivery)
	a.Margin = e.Duration("SLUICE_RLQS_MARGIN", a.Margin)
	a.MinTTL = e.Duration("SLUICE_RLQS_MIN_TTL", a.MinTTL)
	if v := e.String("SLUICE_RLQS_NO_MATCH", a.NoMatch.String()); v != "" {
		nm, err := alloc.ParseNoMatch(strings.ToLower(v))
		if err != nil {
			e.fail(fmt.Errorf("SLUICE_RLQS_NO_MATCH: %w", err))
		}
		a.NoMatch = nm
	}
	a.KeyOrder = keyOrderFromEnv(e, "SLUICE_RLQS_KEY_ORDER")
	o.Shards = e.Int("SLUICE_RLQS_SHARDS", o.Shards)
	o.IdleAfter = e.Duration("SLUICE_RLQS_IDLE", o.IdleAfter)
	o.MaxBuckets = e.Int("SLUICE_RLQS_MAX_BUCKETS", o.MaxBuckets)
	o.MaxReporters = e.Int("SLUICE_RLQS_MAX_REPORTERS", 0) // 0: from the memory cap
	if v := e.String("SLUICE_RLQS_REFUSED", o.Refused.String()); v != "" {
		r, err := quota.ParseRefusal(strings.ToLower(v))
		if err != nil {
			e.fail(fmt.Errorf("SLUICE_RLQS_REFUSED: %w", err))
		}
		o.Refused = r
	}
	o.RefusedTTL = e.Duration("SLUICE_RLQS_REFUSED_TTL", o.RefusedTTL)
	return o
}

// keyOrderFromEnv reads "domain=k1,k2;other=k3": per domain, the BucketId
// keys in the order they are matched against nested descriptors.
func keyOrderFromEnv(e *env, name string) map[string][]string {
	v, _ := e.Lookup(name)
	var out map[string][]string
	for _, part := range strings.Split(v, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		dom, keys, ok := strings.Cut(part, "=")
		dom = strings.TrimSpace(dom)
		var list []string
		for _, k := range strings.Split(keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				list = append(list, k)
			}
		}
		if !ok || dom == "" || len(list) == 0 {
			e.fail(fmt.Errorf("environment: %s: %q is not domain=key1,key2", name, part))
			return nil
		}
		if out == nil {
			out = make(map[string][]string)
		}
		out[dom] = list
	}
	return out
}
