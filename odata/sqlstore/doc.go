// Package sqlstore is the storage of the OData API: one logical schema kept in
// PostgreSQL (through pgx, for production) or in an embedded SQLite file
// (through modernc.org/sqlite, the zero-setup default), one SQL builder with a
// small dialect, migrations, the page probe and row cursors, bulk loading and
// API keys.
//
// Layout. datasets (UUID Id), locations and observations (integer Ids that
// only grow), location_regions (the location → RegionId mapping), api_keys,
// column_stats. Observations carry copies of the filterable attributes of
// their location (type and regions) and the derived ActivityStartYear and
// ActivityGroupType, so every documented filter is a condition on the
// observations table alone, and each filterable column is indexed together
// with id. A page of any filter is then read as index range scans in id
// order: an `or` or `in` becomes one range scan per branch, merged by id, and
// each branch stops as soon as the page is full. Dates, times and timestamps
// are stored as text in their final response form (ISO 8601 UTC timestamps
// with milliseconds sort like the instants they denote), arrays as compact
// JSON text; text columns use byte order ("C" collation on PostgreSQL), so
// both stores order and compare the same way.
//
// Reading a page is two steps, both decided before any byte is sent: Probe
// reads the ids of the page plus one (index only) to learn its bounds and
// whether a next page exists; Rows then streams exactly that id range. Every
// value reaches SQL as a bind parameter; the only text spliced into SQL are
// column names from the field table of package query (its rows give each
// field's table, column and copy on observations; tables, indexes, views and
// filter columns here are derived from them) and this package's own names.
package sqlstore
