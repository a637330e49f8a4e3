package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/kvlist"
)

// Settings are the TRACING_* variables and the standard OTLP exporter ones
// the service reads (OTEL_EXPORTER_OTLP_*).
type Settings struct {
	Enabled           bool    // TRACING_ENABLED
	Protocol          string  // TRACING_EXPORTER_PROTOCOL: http (default) or grpc
	ServiceName       string  // TRACING_SERVICE_NAME, default RateLimit
	ServiceNamespace  string  // TRACING_SERVICE_NAMESPACE
	ServiceInstanceID string  // TRACING_SERVICE_INSTANCE_ID; a random UUIDv4 when empty
	SamplingRate      float64 // TRACING_SAMPLING_RATE, 0 to 1, default 1 (parent-based)

	// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT: a base URL ("/v1/traces" is
	// appended for http) or, for grpc, host:port.
	Endpoint string
	// TracesEndpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as it is; it
	// wins over Endpoint.
	TracesEndpoint string
	// Headers are sent with every export (OTEL_EXPORTER_OTLP_[TRACES_]HEADERS).
	Headers map[string]string
	// Insecure sends grpc without TLS when the endpoint has no scheme
	// (OTEL_EXPORTER_OTLP_[TRACES_]INSECURE).
	Insecure bool
	// Timeout bounds one export (OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT, in milliseconds).
	Timeout time.Duration
	// Compression is "gzip" or "none" (OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION).
	Compression string
}

// DefaultSettings are the reference's defaults.
func DefaultSettings() Settings {
	return Settings{Protocol: "http", ServiceName: "RateLimit", SamplingRate: 1, Timeout: 10 * time.Second}
}

// Validate reports the first setting that cannot work.
func (s Settings) Validate() error {
	if !s.Enabled {
		return nil
	}
	switch s.Protocol {
	case "http", "grpc":
	default:
		//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
		return fmt.Errorf("Invalid otlptrace client protocol: %s", s.Protocol)
	}
	if s.SamplingRate < 0 || s.SamplingRate > 1 {
		return fmt.Errorf("TRACING_SAMPLING_RATE must be between 0 and 1, got %v", s.SamplingRate)
	}
	if s.ServiceName == "" {
		return errors.New("TRACING_SERVICE_NAME must not be empty")
	}
	if s.Timeout <= 0 {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT must be positive, got %v", s.Timeout)
	}
	switch s.Compression {
	case "", "none", "gzip":
	default:
		return fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION must be gzip or none, got %q", s.Compression)
	}
	for _, e := range []string{s.Endpoint, s.TracesEndpoint} {
		if strings.Contains(e, "://") {
			if u, err := url.Parse(e); err != nil || u.Host == "" {
				return fmt.Errorf("OTLP endpoint %q is not a URL", e)
			}
		}
	}
	return nil
}

// ParseHeaders reads the OTLP headers format: "k1=v1,k2=v2" with
// URL-encoded values.
func ParseHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	pairs, err := kvlist.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("OTLP headers: %w", err)
	}
	out := map[string]string{}
	for _, p := range pairs {
		dv, err := url.PathUnescape(p.Value)
		if err != nil {
			return nil, fmt.Errorf("OTLP headers: value of %s: %w", p.Key, err)
		}
		dk, err := url.PathUnescape(p.Key)
		if err != nil {
			return nil, fmt.Errorf("OTLP headers: key %q: %w", p.Key, err)
		}
		out[dk] = dv
	}
	return out, nil
}
