// Package csvimport loads DataStream-format CSV files (the /Records column
// set, one row per observation with its location flattened in) together with
// one small JSON metadata file per dataset (the /Metadata fields, plus an
// optional "Regions" map from MonitoringLocationID to RegionId values).
//
// Every file is read twice. The first pass validates every value against
// the schema and its vocabularies and collects the locations, so a bad value
// is reported as file:line: column before anything is written. The second
// pass streams the rows into the store inside one transaction, so a failed
// import leaves the store as it was.
package csvimport
