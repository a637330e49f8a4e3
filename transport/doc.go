// Package transport is the wire of the rate limit service: the gRPC server
// (the native one, package h2grpc, or grpc-go's) with the RLS v3
// ShouldRateLimit, the RLQS v3 StreamRateLimitQuotas stream, gRPC health
// and reflection; the HTTP /json, /healthcheck and /livez endpoints; the
// debug server; the listeners with their connection caps, and their drain
// on shutdown.
//
// It decides nothing and builds nothing: package server assembles the
// engine, counters and quota service and hands them over in Options; the
// wire decodes a request, calls the Decider, and encodes its answer. Its
// files: wire.go (the one RLS request decoder and the response encoder),
// native.go (the calls on h2grpc, one by one and as batches), rls.go (the
// calls on grpc-go, and the /json decision), rlqs.go (the quota stream),
// convert.go, http.go, debug.go, serve.go (Options, Server, Run),
// listeners.go, accept.go, grpclimits.go, reflection.go, drain.go,
// drainconn.go.
package transport
