// Package gen generates realistic DataStream-shaped data: dozens of datasets
// with full metadata, thousands of monitoring locations spread over the
// provinces and hubs, and observations drawn from the schema's vocabularies
// with their typical units. A few characteristics are very common and a long
// tail (including Titanium at a fixed small rate) is rare, so sparse filters
// exist at every size; a row has a ResultValue or a ResultDetectionCondition,
// never both; optional fields are null about as often as in the real data.
//
// Generation is deterministic for a seed, so a test can regenerate the same
// rows in memory as an oracle for what a store must return.
package gen
