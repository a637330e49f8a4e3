// Package h2grpc serves unary gRPC methods over HTTP/2 without grpc-go's
// server transport: the rate limit call is small, frequent and always the
// same shape, and grpc-go spends about half of a decision's server CPU (and
// ~55 allocations) on per-stream machinery the call does not need.
//
// Flow, per connection:
//
//	reader goroutine ── owns the frame reader and HPACK decoder; opens
//	   │                streams, collects request bytes, answers SETTINGS
//	   │                and PING, applies WINDOW_UPDATE
//	   ▼
//	worker (pooled goroutine) ── runs the method, then appends HEADERS,
//	   │                         DATA and trailers to the connection's
//	   │                         output buffer
//	   ▼
//	whoever appends while no write is in progress writes the whole buffer
//	(one syscall for every answer that piled up meanwhile); the reader
//	never writes itself, it starts a goroutine to, so it can always read.
//
// Bounds a caller cannot lift: concurrent streams per connection (a reset
// stream counts until its method returns), request bytes held per
// connection (the connection window is given back only when a method is
// done with its request), header list size, and output buffered per
// connection (appenders wait, and the reader stops reading, above it).
//
// TLS is the listener's (tls.NewListener with TLSConfig, which offers "h2"
// by ALPN). What it leaves to grpc-go: interceptors, stats handlers (hence
// tracing) and server-streaming methods; the transport package uses this
// server only when none of those is wanted.
package h2grpc
