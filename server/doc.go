// Package server assembles and runs a sluice: from settings.Settings it
// builds the counter stores, the actors router and its leases, the engine,
// the Rate Limit Quota Service, configuration loading and reload (rule
// files watched with fsnotify, or xDS), statistics, TLS and tracing, and
// the wire (package transport); Run serves until its context ends, then
// drains the wire and closes every part in order.
//
// Its files, by concern: server.go (Options, Server, NewServer, Run),
// backends.go (stores, the actors router and its batch policy, leases),
// reload.go and files.go (configuration sources and loading; rulefile.go
// reads a rule file within its bounds), ops.go (statistics sink, TLS, xDS,
// tracing), health.go (the health /healthcheck and gRPC health report),
// logging.go (the service logger).
package server
