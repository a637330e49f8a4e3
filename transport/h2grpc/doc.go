// Package h2grpc serves unary and streaming (server-, client- and
// bidirectional) gRPC methods over HTTP/2 without grpc-go's server
// transport: the rate limit call is small, frequent and always the same
// shape, and grpc-go spends about half of a decision's server CPU (and ~55
// allocations) on per-stream machinery the call does not need.
//
// Flow, per connection:
//
//	reader goroutine ── owns the frame reader and HPACK decoder; opens
//	   │                streams, collects request bytes, answers SETTINGS
//	   │                and PING, applies WINDOW_UPDATE; the calls complete
//	   │                when it has used up what one read brought (or after
//	   │                Options.FramesPerRead frames) are dispatched
//	   │                together: two or more of a method with a
//	   │                BatchMethod (Options.Batches) to one worker as a
//	   │                batch, the BatchMethod called first to get it
//	   │                ready; other calls one per worker. A
//	   │                PING read with them is acknowledged in the next
//	   │                write, which carries the first of their answers
//	   ▼
//	worker (pooled goroutine) ── runs the method (or the batch), then
//	   │                         appends HEADERS, DATA and trailers to the
//	   │                         connection's output buffer (a batch's
//	   │                         answers all before it wakes the writer)
//	   ▼
//	writer goroutine ── the only one that writes the socket: it sleeps
//	                    until the buffer has output, then writes all of it
//	                    (one syscall for every answer that piled up since
//	                    the last), yielding once first while it is small so
//	                    that answers made ready together share the write —
//	                    but not after a batch, whose answers are all there.
//	                    The reader and workers only append under the
//	                    connection's mutex and wake it; a worker waits while
//	                    the buffer is over Options.MaxOutput (the peer's
//	                    reading pace), the reader never waits for a write.
//
// Streaming calls take no pooled worker: a server-streaming method starts
// on a goroutine of its own once its request is read, a bidirectional one
// as soon as its headers are, and its recv takes the messages the reader
// puts in its inbox as their bytes arrive (bidi.go).
//
// Why batches: a gateway's client sends the calls of all its waiting
// callers in one write. Served one by one, the first call's backend round
// trip leaves alone, the rest wait for it, and every answer costs a write
// of its own (plus one for the PING grpc-go's client sends with them). As
// a batch they share one goroutine, one backend call, one wait for it and
// one write.
//
// Bounds a caller cannot lift: concurrent streams per connection (a reset
// unary call counts until its method returns), request bytes held per
// connection (MaxRequestBytes; the connection window itself is given back
// as bytes arrive, so interleaved large requests cannot starve each
// other), frame size, header list size and header block frames, output
// buffered per connection (appenders wait, and the reader stops reading,
// above it), the time one write may take (a peer that stops reading is
// cut off), a gzip request's size once inflated, and the PING and
// SETTINGS a peer may send with no calls between them (FloodLimits; GOAWAY
// ENHANCE_YOUR_CALM past them), and what a bidirectional call's client may
// send ahead of its method (one stream window, given back as the method
// reads; bidi.go), how long a connection may stay without a stream
// (IdleTimeout) and a stream without its request message (StallTimeout;
// idle.go). Graceful stops and connection age drain in two GOAWAY
// phases separated by a PING round trip, as grpc-go does; after the
// second, streaming calls, which may last as long as the connection, see
// their contexts end (ErrDraining, an UNAVAILABLE status, so that clients
// call again elsewhere) instead of being waited for.
//
// To the letter of RFC 9113 and gRPC over HTTP/2: a malformed request
// (sections 8.2 and 8.3: field names and values, pseudo-header fields,
// connection-specific fields, te, content-length) is reset with
// PROTOCOL_ERROR (headers.go); frames on idle streams and DATA on streams
// the peer ended or reset are connection errors, DATA still in flight on
// a stream we reset is dropped, and nothing is written on a closed stream
// (streams.go). A request that is not gRPC gets an HTTP status with a
// short text, as an HTTP server would. Requests may be gzip-coded
// (compress.go); answers are not. Each call keeps its own deadline, also
// inside a batch (deadline.go).
//
// Not done: a reset unary call's method is not cancelled (a context per
// call would cost allocations on the hot path; it holds its slot until it
// returns, which the backend timeout bounds; a streaming call's context is
// cancelled), and the server sends no keepalive pings of its own (TCP
// keepalive finds dead peers).
//
// TLS is the listener's (tls.NewListener with TLSConfig, which offers "h2"
// by ALPN). Streaming methods (health Watch, Envoy's rate limit quota
// stream) run on goroutines of their own, the connection's, and are served
// on the same flow control (streaming.go). What it leaves to grpc-go:
// interceptors and stats handlers (hence tracing); the transport package
// uses this server only when neither is wanted.
//
// Guard (guard.go) brings the limits grpc-go's server lacks to its
// connections: a SETTINGS flood budget, and no more reading from a peer
// whose answers pile up unwritten.
package h2grpc
