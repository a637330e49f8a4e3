// Package query is the typed form of an OData request and the contract between
// the HTTP layer and a store.
//
// It knows the four collections of the DataStream-compatible API (their fields
// in output order, which fields may be selected and filtered) through one
// table of fields (schema.go), which also says where each field is stored,
// so that the store and $metadata derive from it what they need. It decodes a raw
// query string, parses and validates $select, $filter, $top, $skiptoken and
// $count, and builds the next-page link. It never produces SQL: a store turns
// the Filter tree into parameterised SQL of its own dialect, so no part of a
// query string can reach a database as text.
//
// Validation errors carry a detail that names the offending field or token,
// because the official clients show that text to their users unchanged.
package query
