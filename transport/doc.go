// Package transport is the wire side of the rate limit service: the gRPC RLS v3
// server and gRPC health, the HTTP /json and /healthcheck endpoints, the debug
// server, configuration loading (files with fsnotify, or xDS), health, logging,
// and the typed settings read once from the environment.
//
// It builds the engine and the actors router from Settings and hands requests
// to engine.Service; it holds no rate limit logic of its own.
package transport
