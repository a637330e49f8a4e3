// Package odataserver starts the real OData API for the load scenarios:
// bin/sluice generates a data set into an embedded SQLite file, creates API
// keys, and runs `sluice odata` in its own process, so the server's memory is
// measured apart from the clients'.
package odataserver
