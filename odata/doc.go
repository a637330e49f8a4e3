// Package odata is the read-only OData v4 JSON API of sluice, compatible with
// the DataStream open data API and its official clients (Python, JavaScript,
// R, shell): /Metadata, /Locations, /Observations and /Records under a
// configurable root (/v1/odata/v4), served with fasthttp.
//
// A request goes: API key (cached briefly; failed checks throttled per
// client address) or allowed browser origin (limited per origin and client
// address) → the key's turn (pacer.go: one request in flight per key and a
// token-bucket rule, 2 requests/s on average with a burst of 4, through the
// rate limit engine, in process or remote, falling back to in process when
// the remote fails; a request over them waits in a short bounded queue
// instead of being refused) → query validation (package query) and
// the $filter cost budget → a data query slot (a global cap below the pool
// size, so key checks never wait) → a probe that decides the page before the
// first body byte (its id range and whether a next page exists; the 413
// size cap and the 504 time budget are decided here) → status, headers and
// the Link header → rows streamed from the database cursor through a small
// fixed buffer to the client, at the client's pace → the same absolute
// @odata.nextLink at the end of the body.
//
// Memory per request is bounded whatever $top is: rows are encoded one at
// a time into a 64 KiB buffer and written through a pipe of a few chunks;
// when the client stops reading, writes block, the cursor is not advanced
// and the database stops sending. A client that disconnects makes the next
// write fail, which closes the cursor and returns its connection.
//
// Stores live in package sqlstore (PostgreSQL or SQLite), data generation in
// package gen and CSV import in package csvimport.
package odata
