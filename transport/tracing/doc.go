// Package tracing exports OpenTelemetry traces of the rate limit service over
// OTLP (http or grpc), with the reference service's spans: one per gRPC or
// HTTP request, "ShouldRateLimit Execution" for the decision, one for the
// counter round trip of a request (with its batch size), and one per
// backend call a shard makes (its coalesced operations). Trace context arrives in
// W3C traceparent, B3 (single or multi header) or baggage headers.
//
// Nothing here touches global OpenTelemetry state: the provider and the
// propagator are handed to the instrumentation explicitly. The engine does
// not import OpenTelemetry; the service wraps its parts with this package.
package tracing
