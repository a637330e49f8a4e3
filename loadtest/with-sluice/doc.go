// Command with-sluice starts sluice (and a Redis for it, when asked) on
// loopback ports with the loadtest rules, runs one command against it, stops
// everything and exits with the command's status. `make ghz` and `make k6`
// use it so a load tool always meets a fresh, known server.
//
//	go run ./loadtest/with-sluice [-backend memory|redis] -- ghz --config loadtest/ghz/hot-key.json {grpc}
//
// In the command's arguments {grpc}, {http} and {debug} become the server's
// host:port; the same addresses are in the command's environment as
// SLUICE_GRPC_ADDR, SLUICE_HTTP_ADDR and SLUICE_DEBUG_ADDR. The command is
// killed after -timeout; sluice must then stop cleanly on SIGTERM, which is
// checked too (a non-zero exit of sluice fails the run).
package main
