// Package standin runs the OData API for the load scenarios until
// `sluice serve` does: the odata package over an embedded SQLite filled with
// generated data, in a child process (the calling program started again
// with -internal-serve), so the server's memory is measured apart from the
// clients'. WAITING FOR cmd/sluice to serve OData; then the scenarios point
// at bin/sluice instead and this package goes.
package standin
