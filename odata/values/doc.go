// Package values holds the DataStream schema vocabularies (allowed values of the
// enumerated fields and two lookups) embedded in the binary, so the importer,
// the generator and the tests need nothing outside the repository.
//
// The files are an unmodified copy of the public datastreamapp/schema value
// lists; LICENSE beside them applies to them.
package values
