// Command with-odata starts an OData server with generated data and API
// keys, runs one command against it, stops the server and exits with the
// command's status. `make k6` runs the OData k6 script through it.
//
//	go run ./loadtest/with-odata [-keys 4] -- k6 run loadtest/k6/odata.js
//
// The command's environment carries ODATA_URL (the service root) and
// ODATA_KEYS (comma-separated keys); {url} and {keys} in its arguments are
// replaced by the same.
//
// The server is the stand-in of loadtest/internal/standin (the odata
// package in a child process) until `sluice serve` runs the OData API:
// WAITING FOR cmd/sluice to serve OData.
package main
