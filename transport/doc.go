// Package transport is the wire side of the rate limit service: the gRPC RLS v3
// server and gRPC health, the HTTP /json and /healthcheck endpoints, the debug
// server, configuration loading (files with fsnotify, or xDS), health and
// logging. The settings it is built from are read from the environment by
// package settings.
//
// It builds the engine and the actors router from settings.Settings and hands requests
// to engine.Service; it holds no rate limit logic of its own. Its files do
// two jobs:
//
//   - the wire: wire.go (the one RLS request decoder and the response
//     encoder), native.go (the calls on h2grpc, one by one and as
//     batches), rls.go (the calls on grpc-go, and the /json decision),
//     convert.go, http.go, debug.go, listeners.go, drain.go;
//   - assembling the service: server.go, backends.go (stores, the actors
//     router and its batch policy), ops.go, reload.go, files.go,
//     health.go, logging.go.
package transport
