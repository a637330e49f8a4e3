package query

import "sort"

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

// Field is one column of a collection's rows.
type Field struct {
	Name     string
	Kind     Kind
	Nullable bool
}

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

// Collection is one entity set: /Metadata, /Locations, /Observations or /Records.
type Collection struct {
	Name string
	// Fields in response order (the tables of odata-api.md).
	Fields []Field
	// UUIDKey is true for /Metadata, whose Id and $skiptoken are UUIDs.
	UUIDKey bool

	index   map[string]int
	filters map[string]LitType
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
	t, ok := c.filters[name]
	return t, name, ok
}

// FilterableNames returns the canonical names accepted in $filter on c,
// sorted; aliases are not listed. Some are not properties of the rows
// (RegionId, ActivityStartYear, ...): they filter by related data.
func (c *Collection) FilterableNames() []string {
	out := make([]string, 0, len(c.filters))
	for name := range c.filters {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// filterAliases maps alternative spellings accepted in $filter to the
// canonical field name.
var filterAliases = map[string]string{
	"ActivityStartDateYear": "ActivityStartYear",
}

func newCollection(name string, uuidKey bool, fields []Field, filters map[string]LitType) *Collection {
	c := &Collection{Name: name, Fields: fields, UUIDKey: uuidKey, index: map[string]int{}, filters: filters}
	for i, f := range fields {
		c.index[f.Name] = i
	}
	return c
}

func str(name string) Field           { return Field{Name: name, Kind: KindString} }
func nstr(name string) Field          { return Field{Name: name, Kind: KindString, Nullable: true} }
func nfloat(name string) Field        { return Field{Name: name, Kind: KindFloat, Nullable: true} }
func ndate(name string) Field         { return Field{Name: name, Kind: KindDate, Nullable: true} }
func ntime(name string) Field         { return Field{Name: name, Kind: KindTime, Nullable: true} }
func fixed(name string, k Kind) Field { return Field{Name: name, Kind: k} }

// observationTail is the part of an observation row shared with /Records,
// from ActivityType to LaboratorySampleID. detectionLimit holds the two
// detection-limit fields in the collection's own order.
func observationTail(detectionLimit [2]Field) []Field {
	return []Field{
		str("ActivityType"),
		str("ActivityMediaName"),
		fixed("ActivityStartDate", KindDate),
		ntime("ActivityStartTime"),
		nstr("ActivityStartTimeZone"),
		ndate("ActivityEndDate"),
		ntime("ActivityEndTime"),
		nstr("ActivityEndTimeZone"),
		nfloat("ActivityDepthHeightMeasure"),
		nstr("ActivityDepthHeightUnit"),
		nstr("SampleCollectionEquipmentName"),
		str("CharacteristicName"),
		nstr("MethodSpeciation"),
		nstr("ResultSampleFraction"),
		// ResultValue and ResultDetectionCondition are exclusive, so both
		// may be null in storage even though the spec lists a number.
		nfloat("ResultValue"),
		nstr("ResultUnit"),
		nstr("ResultValueType"),
		nstr("ResultDetectionCondition"),
		detectionLimit[0],
		detectionLimit[1],
		nstr("ResultDetectionQuantitationLimitType"),
		nstr("ResultStatusID"),
		nstr("ResultComment"),
		nstr("ResultAnalyticalMethodID"),
		nstr("ResultAnalyticalMethodContext"),
		nstr("ResultAnalyticalMethodName"),
		ndate("AnalysisStartDate"),
		ntime("AnalysisStartTime"),
		nstr("AnalysisStartTimeZone"),
		nstr("LaboratoryName"),
		nstr("LaboratorySampleID"),
	}
}

var (
	detectionUnitMeasure = [2]Field{nstr("ResultDetectionQuantitationLimitUnit"), nfloat("ResultDetectionQuantitationLimitMeasure")}
	detectionMeasureUnit = [2]Field{nfloat("ResultDetectionQuantitationLimitMeasure"), nstr("ResultDetectionQuantitationLimitUnit")}
)

// Filter sets shared by several collections.
func observationFilters() map[string]LitType {
	return map[string]LitType{
		"DOI":                    LitText,
		"LocationId":             LitInt,
		"ActivityMediaName":      LitText,
		"ActivityGroupType":      LitText,
		"CharacteristicName":     LitText,
		"MonitoringLocationType": LitText,
		"ActivityStartYear":      LitInt,
		"RegionId":               LitRegion,
	}
}

func with(m map[string]LitType, extra map[string]LitType) map[string]LitType {
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// The four collections.
var (
	Metadata = newCollection("Metadata", true, []Field{
		str("Id"),
		str("DOI"),
		str("Version"),
		str("DatasetName"),
		str("DataStewardEmail"),
		str("DataCollectionOrganization"),
		str("DataUploadOrganization"),
		str("ProgressCode"),
		str("MaintenanceFrequencyCode"),
		str("Abstract"),
		str("DataCollectionInformation"),
		str("DataProcessing"),
		str("FundingSources"),
		nstr("DataSourceURL"),
		str("OtherDataSources"),
		str("Citation"),
		str("Licence"),
		str("Disclaimer"),
		fixed("TopicCategoryCode", KindJSON),
		fixed("Keywords", KindJSON),
		fixed("CreateTimestamp", KindTimestamp),
		fixed("PublishedTimestamp", KindTimestamp),
		{Name: "TemporalExtent", Kind: KindJSON, Nullable: true},
	}, with(observationFilters(), map[string]LitType{
		"DatasetName":     LitText,
		"CreateTimestamp": LitInstant,
		"Id":              LitUUID,
		"Latitude":        LitFloat,
		"Longitude":       LitFloat,
	}))

	Locations = newCollection("Locations", false, []Field{
		fixed("Id", KindInt),
		str("DOI"),
		str("ID"),
		str("Name"),
		fixed("Latitude", KindFloat),
		fixed("Longitude", KindFloat),
		str("HorizontalCoordinateReferenceSystem"),
		nfloat("HorizontalAccuracyMeasure"),
		nstr("HorizontalAccuracyUnit"),
		nfloat("VerticalMeasure"),
		nstr("VerticalUnit"),
		str("MonitoringLocationType"),
	}, with(observationFilters(), map[string]LitType{
		"Name":      LitText,
		"Latitude":  LitFloat,
		"Longitude": LitFloat,
		// The R and shell clients rewrite LocationId to Id for /Locations.
		"Id": LitInt,
	}))

	Observations = newCollection("Observations", false, append([]Field{
		fixed("Id", KindInt),
		str("DOI"),
		fixed("LocationId", KindInt),
	}, observationTail(detectionUnitMeasure)...), observationFilters())

	Records = newCollection("Records", false, append([]Field{
		fixed("Id", KindInt),
		str("DOI"),
		str("DatasetName"),
		str("MonitoringLocationID"),
		str("MonitoringLocationName"),
		fixed("MonitoringLocationLatitude", KindFloat),
		fixed("MonitoringLocationLongitude", KindFloat),
		str("MonitoringLocationHorizontalCoordinateReferenceSystem"),
		nfloat("MonitoringLocationHorizontalAccuracyMeasure"),
		nstr("MonitoringLocationHorizontalAccuracyUnit"),
		nfloat("MonitoringLocationVerticalMeasure"),
		nstr("MonitoringLocationVerticalUnit"),
		str("MonitoringLocationType"),
	}, observationTail(detectionMeasureUnit)...), observationFilters())
)

// Collections lists every collection by its path segment.
var Collections = map[string]*Collection{
	Metadata.Name:     Metadata,
	Locations.Name:    Locations,
	Observations.Name: Observations,
	Records.Name:      Records,
}
