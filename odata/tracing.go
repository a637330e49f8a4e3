package odata

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentation names the tracer of the OData API's spans.
const instrumentation = "github.com/sluicehq/sluice/odata"

// noSpan is what a request carries when tracing is off.
var noSpan = noop.Span{}

// headerCarrier reads a request's headers for the propagator.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(string, string)    {}
func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// startRequestSpan starts the span of one request, a child of the
// caller's trace when its headers carry one.
func (s *Server) startRequestSpan(ctx *fasthttp.RequestCtx) trace.Span {
	if s.tracer == nil {
		return noSpan
	}
	parent := context.Background()
	if s.prop != nil {
		parent = s.prop.Extract(parent, headerCarrier{&ctx.Request.Header})
	}
	_, span := s.tracer.Start(parent, "odata "+string(ctx.Method()), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", string(ctx.Method()))))
	return span
}

// child starts a span under the request's span; with tracing off it costs
// nothing and ctx is returned as it is.
func (s *Server) child(ctx context.Context, parent trace.Span, name string) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, noSpan
	}
	return s.tracer.Start(trace.ContextWithSpan(ctx, parent), name)
}

// endSpan ends a child span, marking it failed on err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// finishRequestSpan sets what the request came to and ends its span.
func finishRequestSpan(r *accessRecord, status int, bytes int64) {
	span := r.span
	if span == nil || !span.IsRecording() {
		return
	}
	coll := r.coll
	if coll == "" {
		coll = "none"
	}
	span.SetName("odata " + r.method + " " + coll)
	span.SetAttributes(
		attribute.String("odata.collection", coll),
		attribute.Int("http.response.status_code", status),
		attribute.Int64("odata.rows", r.rows),
		attribute.Int64("odata.response_bytes", bytes),
	)
	if r.dbWork {
		attrs := []attribute.KeyValue{attribute.Int("odata.filter_cost", r.cost), attribute.Bool("odata.csv", r.csv)}
		if r.coding != "" {
			attrs = append(attrs, attribute.String("http.response.content_coding", r.coding))
		}
		span.SetAttributes(attrs...)
	}
	if status >= 500 {
		span.SetStatus(codes.Error, statusLabel(status))
	}
	span.End()
}
