// Package transport is the wire side of the rate limit service: the gRPC RLS v3
// server and gRPC health, the HTTP /json and /healthcheck endpoints, the debug
// server, configuration loading (files with fsnotify, or xDS), health, logging,
// and the typed settings read once from the environment.
//
// It builds the engine and the actors router from Settings and hands requests
// to engine.Service; it holds no rate limit logic of its own. Its files do
// three jobs:
//
//   - the wire: wire.go (the one RLS request decoder and the response
//     encoder), native.go (the calls on h2grpc, one by one and as
//     batches), rls.go (the calls on grpc-go, and the /json decision),
//     convert.go, http.go, debug.go, listeners.go, drain.go;
//   - assembling the service: server.go, backends.go (stores, the actors
//     router and its batch policy), ops.go, reload.go, files.go,
//     health.go, logging.go;
//   - settings: settings.go (the typed settings and their validation) and
//     env.go (reading them from the environment, once).
package transport
