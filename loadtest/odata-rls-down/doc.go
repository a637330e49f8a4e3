// Command odata-rls-down checks that the OData per-key limit holds when the
// remote rate limit service is down: a limit that turned off silently would
// let one key make thousands of requests a second.
//
// It starts `sluice odata -rate-limit-service 127.0.0.1:<a port nothing
// listens on> -requests-per-second 2 -burst 4` (the default -rate-limit-fallback
// local), then one key asks /Locations?$top=1 as fast as it is answered,
// one request at a time, for -duration.
//
// Promises (exit 1 when one breaks):
//
//   - limited: at most 4 + 2 × (whole seconds of the run) answers are 200,
//     and the rest 429 with Retry-After; nothing else;
//
//   - said once: the server's log names the failing service in exactly one
//     WARN line.
//
// Run it alone from the repository root, after make build:
//
//	go run ./loadtest/odata-rls-down [-duration 5s]
package main
