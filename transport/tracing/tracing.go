package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// instrumentation names the tracer of sluice's own spans.
const instrumentation = "github.com/sluicehq/sluice/transport"

// Options are what a Tracing needs besides its settings.
type Options struct {
	Logger *slog.Logger
}

// Tracing is one service's tracer provider and propagator.
type Tracing struct {
	s      Settings
	log    *slog.Logger
	tp     *sdktrace.TracerProvider
	prop   propagation.TextMapPropagator
	tracer trace.Tracer
}

// New builds the provider. Spans are recorded but go nowhere until Start
// attaches the exporter, so New starts nothing that would need stopping.
func New(s Settings, o Options) (*Tracing, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	instance := s.ServiceInstanceID
	if instance == "" {
		instance = uuid.NewString()
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", s.ServiceName),
		attribute.String("service.instance.id", instance),
	}
	if s.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", s.ServiceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SamplingRate))),
	)
	return &Tracing{
		s:      s,
		log:    o.Logger,
		tp:     tp,
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{}),
		tracer: tp.Tracer(instrumentation),
	}, nil
}

// Start connects the OTLP exporter. The exporter sends in the background and
// never blocks a request; spans that cannot be sent are dropped.
func (t *Tracing) Start(ctx context.Context) error {
	exp, err := t.exporter(ctx)
	if err != nil {
		return fmt.Errorf("tracing: OTLP %s exporter: %w", t.s.Protocol, err)
	}
	t.tp.RegisterSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	t.log.Info("tracing enabled", "protocol", t.s.Protocol, "endpoint", t.endpointForLog())
	return nil
}

// Shutdown sends the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

func (t *Tracing) endpointForLog() string {
	if t.s.TracesEndpoint != "" {
		return t.s.TracesEndpoint
	}
	if t.s.Endpoint != "" {
		return t.s.Endpoint
	}
	return "default"
}

func (t *Tracing) exporter(ctx context.Context) (*otlptrace.Exporter, error) {
	s := t.s
	gzip := s.Compression == "gzip"
	if s.Protocol == "grpc" {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(s.Timeout)}
		switch e := firstNonEmpty(s.TracesEndpoint, s.Endpoint); {
		case strings.Contains(e, "://"):
			opts = append(opts, otlptracegrpc.WithEndpointURL(e))
		case e != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(e))
			if s.Insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		if len(s.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(s.Headers))
		}
		if gzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithTimeout(s.Timeout)}
	switch {
	case s.TracesEndpoint != "":
		opts = append(opts, endpointHTTP(s.TracesEndpoint, "", s.Insecure)...)
	case s.Endpoint != "":
		opts = append(opts, endpointHTTP(s.Endpoint, "/v1/traces", s.Insecure)...)
	}
	if len(s.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(s.Headers))
	}
	if gzip {
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	}
	return otlptracehttp.New(ctx, opts...)
}

// endpointHTTP points the http exporter at e; suffix is appended to a base URL.
func endpointHTTP(e, suffix string, insecure bool) []otlptracehttp.Option {
	if !strings.Contains(e, "://") {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(e)}
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return opts
	}
	if suffix != "" {
		e = strings.TrimSuffix(e, "/") + suffix
	}
	return []otlptracehttp.Option{otlptracehttp.WithEndpointURL(e)}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Propagator reads and writes W3C trace context, B3 and baggage.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.prop }

// TracerProvider is the provider of every span of the service.
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.tp }

// GRPCServerOption adds a server span to every gRPC call, continuing the
// caller's trace.
func (t *Tracing) GRPCServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(t.prop),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	))
}

// HTTPHandler adds a server span named "<METHOD> <path>" to every request.
func (t *Tracing) HTTPHandler(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "ratelimit-http",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }),
	)
}
