package query

import (
	"maps"
	"slices"
	"strings"
	"unicode"
)

// This file is the one table of the API's fields. Every row says what a
// field is (name, kind, nullability), where it is stored (level, column,
// a copy on observations) and how $filter uses it (literal type, index).
// The collections list the rows they return and the rows they filter on;
// package sqlstore derives its tables, indexes, views and filter columns
// from the rows, and the server derives $metadata from the collections.
// Adding a filterable field is one row here, its place in the collections
// that carry it, and its data.

// Kind is how a field's value is written in a response row.
type Kind uint8

// Field kinds. Dates, times and timestamps are stored and sent as strings in
// their final form (2020-01-01, 15:30:00, 2020-01-01T15:30:00.000Z).
const (
	KindString Kind = iota + 1
	KindInt
	KindFloat
	KindDate
	KindTime
	KindTimestamp
	// KindJSON is a value stored as a compact JSON document (arrays of
	// strings) and written as is.
	KindJSON
)

// LitType is the type a $filter literal is converted to for a field.
type LitType uint8

// Literal types of filterable fields.
const (
	LitText LitType = iota + 1
	LitInt
	LitFloat
	// LitInstant is a timestamp; literals may be a date or a date-time and are
	// normalised to the stored form 2006-01-02T15:04:05.000Z.
	LitInstant
	LitUUID
	// LitRegion is a RegionId: only eq, ne and in apply.
	LitRegion
)

// Level is the table a field is stored in: each dataset has locations,
// each location observations.
type Level uint8

// Levels, outermost first.
const (
	LevelDataset Level = iota
	LevelLocation
	LevelObservation
)

// Table is the name of the level's table.
func (l Level) Table() string {
	return [...]string{"datasets", "locations", "observations"}[l]
}

// Alias is the level's table alias in every statement.
func (l Level) Alias() string { return [...]string{"d", "l", "o"}[l] }

// Field is one row of the field table.
type Field struct {
	Name     string
	Kind     Kind
	Nullable bool

	// Level is the table that holds the field, Column its column there.
	// RegionId has no column of its own: the form of a literal picks one
	// of the region columns.
	Level  Level
	Column string
	// Copied says that observations hold a copy of this dataset or
	// location field (in CopyColumn, or Column when that is empty), so
	// that a filter over observations needs no join.
	Copied     bool
	CopyColumn string

	// Filter is the type of a $filter literal on the field, 0 when it is
	// not filterable.
	Filter LitType
	// Indexed says the field's table has an index (Column, id) serving a
	// page of its filters in id order; IndexName names it when the name
	// is not <table>_<column>. A copied field's copy has one on
	// observations (observations_<copy column>).
	Indexed   bool
	IndexName string
}

// ObsColumn returns the column of observations that holds f: its own
// column or its copy (for RegionId "": the literal picks the column); ok is
// false when observations do not hold it.
func (f *Field) ObsColumn() (col string, ok bool) {
	switch {
	case f.Level == LevelObservation:
		return f.Column, true
	case !f.Copied:
		return "", false
	case f.CopyColumn != "":
		return f.CopyColumn, true
	}
	return f.Column, true
}

// Index is the name of the (Column, id) index of an indexed field.
func (f *Field) Index() string {
	if f.IndexName != "" {
		return f.IndexName
	}
	return f.Level.Table() + "_" + f.Column
}

// Collection is one entity set: /Metadata, /Locations, /Observations or /Records.
type Collection struct {
	Name string
	// Level is the table of the collection's rows (Records are
	// observations joined with their location and dataset).
	Level Level
	// Fields in response order (the tables of odata-api.md).
	Fields []Field
	// FilterOnly are the fields $filter accepts that are not properties of
	// the rows: they filter by related data (a location's region, an
	// observation's year, ...).
	FilterOnly []Field
	// UUIDKey is true for /Metadata, whose Id and $skiptoken are UUIDs.
	UUIDKey bool

	index   map[string]int
	filters map[string]*Field
}

// FieldIndex returns the position of a field in Fields.
func (c *Collection) FieldIndex(name string) (int, bool) {
	i, ok := c.index[name]
	return i, ok
}

// Filterable returns the literal type of a filterable field, after resolving
// aliases, and the canonical field name.
func (c *Collection) Filterable(name string) (LitType, string, bool) {
	if canon, ok := filterAliases[name]; ok {
		name = canon
	}
	f, ok := c.filters[name]
	if !ok {
		return 0, name, false
	}
	return f.Filter, name, true
}

// FilterField returns the row of a field $filter accepts on c, by its
// canonical name.
func (c *Collection) FilterField(name string) (*Field, bool) {
	f, ok := c.filters[name]
	return f, ok
}

// FilterableNames returns the canonical names accepted in $filter on c,
// sorted; aliases are not listed. Some are not properties of the rows
// (FilterOnly).
func (c *Collection) FilterableNames() []string {
	return slices.Sorted(maps.Keys(c.filters))
}

// filterAliases maps alternative spellings accepted in $filter to the
// canonical field name.
var filterAliases = map[string]string{
	"ActivityStartDateYear": "ActivityStartYear",
}

func newCollection(name string, level Level, uuidKey bool, fields, filterOnly []Field) *Collection {
	c := &Collection{Name: name, Level: level, Fields: fields, FilterOnly: filterOnly, UUIDKey: uuidKey,
		index: map[string]int{}, filters: map[string]*Field{}}
	for i := range fields {
		c.index[fields[i].Name] = i
		if fields[i].Filter != 0 {
			c.filters[fields[i].Name] = &c.Fields[i]
		}
	}
	for i := range filterOnly {
		c.filters[filterOnly[i].Name] = &c.FilterOnly[i]
	}
	return c
}

// Snake turns a field name into its column name: ActivityStartDate →
// activity_start_date, ResultStatusID → result_status_id, DataSourceURL →
// data_source_url.
func Snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) ||
				(i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Row constructors: a field of a level, stored in the column its name
// gives (Snake), not filterable; the methods below add the rest.
func at(l Level, name string, k Kind) Field {
	return Field{Name: name, Kind: k, Level: l, Column: Snake(name)}
}

func (f Field) null() Field                { f.Nullable = true; return f }
func (f Field) column(c string) Field      { f.Column = c; return f }
func (f Field) filter(t LitType) Field     { f.Filter = t; return f }
func (f Field) indexed(name string) Field  { f.Indexed, f.IndexName = true, name; return f }
func (f Field) copied(column string) Field { f.Copied, f.CopyColumn = true, column; return f }
func (f Field) renamed(name string) Field  { f.Name = name; return f }
func (f Field) unfiltered() Field          { f.Filter, f.Indexed, f.IndexName = 0, false, ""; return f }
func obs(name string, k Kind) Field        { return at(LevelObservation, name, k) }
func loc(name string, k Kind) Field        { return at(LevelLocation, name, k) }
func dataset(name string, k Kind) Field    { return at(LevelDataset, name, k) }
func text(l Level, name string) Field      { return at(l, name, KindString) }
func nullText(l Level, name string) Field  { return at(l, name, KindString).null() }
func nullFloat(l Level, name string) Field { return at(l, name, KindFloat).null() }
func observed(name string, t LitType) Field {
	return text(LevelObservation, name).filter(t).indexed("")
}

// Tail positions: the fields from ActivityType to LaboratorySampleID, in
// the order of the /Observations rows. Loaders fill an observation's tail
// by these positions; Tail holds the rows.
const (
	ActivityType = iota
	ActivityMediaName
	ActivityStartDate
	ActivityStartTime
	ActivityStartTimeZone
	ActivityEndDate
	ActivityEndTime
	ActivityEndTimeZone
	ActivityDepthHeightMeasure
	ActivityDepthHeightUnit
	SampleCollectionEquipmentName
	CharacteristicName
	MethodSpeciation
	ResultSampleFraction
	ResultValue
	ResultUnit
	ResultValueType
	ResultDetectionCondition
	ResultDetectionQuantitationLimitUnit
	ResultDetectionQuantitationLimitMeasure
	ResultDetectionQuantitationLimitType
	ResultStatusID
	ResultComment
	ResultAnalyticalMethodID
	ResultAnalyticalMethodContext
	ResultAnalyticalMethodName
	AnalysisStartDate
	AnalysisStartTime
	AnalysisStartTimeZone
	LaboratoryName
	LaboratorySampleID
	TailLen
)

// Tail is the part of an observation row shared with /Records, keyed by
// the tail positions so that the two cannot drift apart.
var Tail = [TailLen]Field{
	ActivityType:                  text(LevelObservation, "ActivityType"),
	ActivityMediaName:             observed("ActivityMediaName", LitText),
	ActivityStartDate:             obs("ActivityStartDate", KindDate),
	ActivityStartTime:             obs("ActivityStartTime", KindTime).null(),
	ActivityStartTimeZone:         nullText(LevelObservation, "ActivityStartTimeZone"),
	ActivityEndDate:               obs("ActivityEndDate", KindDate).null(),
	ActivityEndTime:               obs("ActivityEndTime", KindTime).null(),
	ActivityEndTimeZone:           nullText(LevelObservation, "ActivityEndTimeZone"),
	ActivityDepthHeightMeasure:    nullFloat(LevelObservation, "ActivityDepthHeightMeasure"),
	ActivityDepthHeightUnit:       nullText(LevelObservation, "ActivityDepthHeightUnit"),
	SampleCollectionEquipmentName: nullText(LevelObservation, "SampleCollectionEquipmentName"),
	CharacteristicName:            observed("CharacteristicName", LitText),
	MethodSpeciation:              nullText(LevelObservation, "MethodSpeciation"),
	ResultSampleFraction:          nullText(LevelObservation, "ResultSampleFraction"),
	// ResultValue and ResultDetectionCondition are exclusive, so both
	// may be null in storage even though the spec lists a number.
	ResultValue:                             nullFloat(LevelObservation, "ResultValue"),
	ResultUnit:                              nullText(LevelObservation, "ResultUnit"),
	ResultValueType:                         nullText(LevelObservation, "ResultValueType"),
	ResultDetectionCondition:                nullText(LevelObservation, "ResultDetectionCondition"),
	ResultDetectionQuantitationLimitUnit:    nullText(LevelObservation, "ResultDetectionQuantitationLimitUnit"),
	ResultDetectionQuantitationLimitMeasure: nullFloat(LevelObservation, "ResultDetectionQuantitationLimitMeasure"),
	ResultDetectionQuantitationLimitType:    nullText(LevelObservation, "ResultDetectionQuantitationLimitType"),
	ResultStatusID:                          nullText(LevelObservation, "ResultStatusID"),
	ResultComment:                           nullText(LevelObservation, "ResultComment"),
	ResultAnalyticalMethodID:                nullText(LevelObservation, "ResultAnalyticalMethodID"),
	ResultAnalyticalMethodContext:           nullText(LevelObservation, "ResultAnalyticalMethodContext"),
	ResultAnalyticalMethodName:              nullText(LevelObservation, "ResultAnalyticalMethodName"),
	AnalysisStartDate:                       obs("AnalysisStartDate", KindDate).null(),
	AnalysisStartTime:                       obs("AnalysisStartTime", KindTime).null(),
	AnalysisStartTimeZone:                   nullText(LevelObservation, "AnalysisStartTimeZone"),
	LaboratoryName:                          nullText(LevelObservation, "LaboratoryName"),
	LaboratorySampleID:                      nullText(LevelObservation, "LaboratorySampleID"),
}

// TailIndex returns the tail position of an observation field name.
func TailIndex(name string) (int, bool) {
	for i := range Tail {
		if Tail[i].Name == name {
			return i, true
		}
	}
	return 0, false
}

// Rows used by several collections. The dataset's DOI is copied onto its
// locations and observations; a location's id, type and regions onto its
// observations; an observation's year and activity group are derived from
// its date and type when it is loaded.
var (
	doiField      = text(LevelDataset, "DOI").filter(LitText).copied("")
	locationID    = loc("LocationId", KindInt).column("id").copied("location_id").filter(LitInt)
	locationType  = text(LevelLocation, "MonitoringLocationType").copied("").filter(LitText).indexed("locations_type")
	regionID      = nullText(LevelLocation, "RegionId").column("").copied("").filter(LitRegion).indexed("")
	startYear     = obs("ActivityStartYear", KindInt).filter(LitInt).indexed("")
	groupType     = observed("ActivityGroupType", LitText)
	latitude      = loc("Latitude", KindFloat).filter(LitFloat).indexed("locations_lat")
	longitude     = loc("Longitude", KindFloat).filter(LitFloat).indexed("locations_lon")
	datasetName   = text(LevelDataset, "DatasetName").filter(LitText).indexed("datasets_name")
	observationID = obs("Id", KindInt).column("id")
)

// locationFields are a location's properties after Id and DOI, as
// /Locations returns them; /Records returns them prefixed with
// MonitoringLocation.
var locationFields = []Field{
	text(LevelLocation, "ID").column("monitoring_location_id"),
	text(LevelLocation, "Name").filter(LitText).indexed(""),
	latitude,
	longitude,
	text(LevelLocation, "HorizontalCoordinateReferenceSystem"),
	nullFloat(LevelLocation, "HorizontalAccuracyMeasure"),
	nullText(LevelLocation, "HorizontalAccuracyUnit"),
	nullFloat(LevelLocation, "VerticalMeasure"),
	nullText(LevelLocation, "VerticalUnit"),
}

// observationTail is the tail in a collection's order: /Records lists the
// detection limit's measure before its unit.
func observationTail(measureFirst bool) []Field {
	out := append([]Field(nil), Tail[:]...)
	if measureFirst {
		u, m := ResultDetectionQuantitationLimitUnit, ResultDetectionQuantitationLimitMeasure
		out[u], out[m] = out[m], out[u]
	}
	return out
}

func concat(parts ...[]Field) []Field {
	var out []Field
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The four collections.
var (
	Metadata = newCollection("Metadata", LevelDataset, true, []Field{
		text(LevelDataset, "Id").column("id").filter(LitUUID),
		doiField,
		text(LevelDataset, "Version"),
		datasetName,
		text(LevelDataset, "DataStewardEmail"),
		text(LevelDataset, "DataCollectionOrganization"),
		text(LevelDataset, "DataUploadOrganization"),
		text(LevelDataset, "ProgressCode"),
		text(LevelDataset, "MaintenanceFrequencyCode"),
		text(LevelDataset, "Abstract"),
		text(LevelDataset, "DataCollectionInformation"),
		text(LevelDataset, "DataProcessing"),
		text(LevelDataset, "FundingSources"),
		nullText(LevelDataset, "DataSourceURL"),
		text(LevelDataset, "OtherDataSources"),
		text(LevelDataset, "Citation"),
		text(LevelDataset, "Licence"),
		text(LevelDataset, "Disclaimer"),
		dataset("TopicCategoryCode", KindJSON),
		dataset("Keywords", KindJSON),
		dataset("CreateTimestamp", KindTimestamp).filter(LitInstant).indexed("datasets_created"),
		dataset("PublishedTimestamp", KindTimestamp),
		dataset("TemporalExtent", KindJSON).null(),
	}, []Field{
		locationID, Tail[ActivityMediaName], groupType, Tail[CharacteristicName],
		locationType, startYear, regionID, latitude, longitude,
	})

	Locations = newCollection("Locations", LevelLocation, false, concat([]Field{
		// The R and shell clients rewrite LocationId to Id for /Locations.
		loc("Id", KindInt).column("id").filter(LitInt),
		// A location keeps its dataset's DOI as its own column.
		text(LevelLocation, "DOI").filter(LitText).indexed(""),
	}, locationFields, []Field{locationType}), []Field{
		locationID, Tail[ActivityMediaName], groupType, Tail[CharacteristicName], startYear, regionID,
	})

	Observations = newCollection("Observations", LevelObservation, false, concat([]Field{
		observationID,
		doiField,
		locationID,
	}, observationTail(false)), []Field{
		// In the order of their columns on observations.
		locationType, regionID, startYear, groupType,
	})

	Records = newCollection("Records", LevelObservation, false, concat([]Field{
		observationID,
		doiField,
		datasetName.unfiltered(),
	}, monitoringLocation(locationFields), []Field{locationType}, observationTail(true)), []Field{
		locationID, groupType, startYear, regionID,
	})
)

// monitoringLocation renames location fields as /Records returns them;
// $filter does not accept them there.
func monitoringLocation(fields []Field) []Field {
	out := make([]Field, len(fields))
	for i, f := range fields {
		out[i] = f.renamed("MonitoringLocation" + f.Name).unfiltered()
	}
	return out
}

// Collections lists every collection by its path segment.
var Collections = map[string]*Collection{
	Metadata.Name:     Metadata,
	Locations.Name:    Locations,
	Observations.Name: Observations,
	Records.Name:      Records,
}
