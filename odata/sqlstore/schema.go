package sqlstore

import (
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/odata/query"
)

// colType is the storage type of a column.
type colType uint8

const (
	tInt colType = iota + 1
	tFloat
	tText
)

type column struct {
	name string
	typ  colType
	null bool
}

type index struct {
	name   string
	cols   []string
	unique bool
}

type table struct {
	name    string
	cols    []column
	pk      []string
	indexes []index
}

// snake turns a field name into its column name: ActivityStartDate →
// activity_start_date, ResultStatusID → result_status_id, DataSourceURL →
// data_source_url.
func snake(s string) string {
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

func kindType(k query.Kind) colType {
	switch k {
	case query.KindInt:
		return tInt
	case query.KindFloat:
		return tFloat
	}
	return tText
}

// Observation tail: the fields from ActivityType to LaboratorySampleID, in
// the order of the /Observations rows. Loaders fill Observation.Tail by
// these positions.
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

// obsTailOffset is the position of ActivityType in query.Observations.Fields.
const obsTailOffset = 3

// TailField returns the schema field at a tail position.
func TailField(i int) query.Field { return query.Observations.Fields[obsTailOffset+i] }

// TailIndex returns the tail position of an observation field name.
func TailIndex(name string) (int, bool) {
	i, ok := query.Observations.FieldIndex(name)
	if !ok || i < obsTailOffset {
		return 0, false
	}
	return i - obsTailOffset, true
}

// Region columns: a location has at most one region of each kind.
var regionKinds = []struct{ prefix, col string }{
	{"admin.2.", "region_country"},
	{"admin.4.", "region_province"},
	{"hub.", "region_hub"},
}

// regionColumn returns the column holding a RegionId of that form, or "".
func regionColumn(region string) string {
	for _, k := range regionKinds {
		if strings.HasPrefix(region, k.prefix) && len(region) > len(k.prefix) {
			return k.col
		}
	}
	return ""
}

var (
	datasetsTable  = buildDatasets()
	locationsTable = buildLocations()
	regionsTable   = &table{
		name: "location_regions",
		cols: []column{{name: "location_id", typ: tInt}, {name: "region_id", typ: tText}},
		pk:   []string{"location_id", "region_id"},
		indexes: []index{
			{name: "location_regions_region", cols: []string{"region_id", "location_id"}},
		},
	}
	observationsTable = buildObservations()
	keysTable         = &table{
		name: "api_keys",
		cols: []column{
			{name: "id", typ: tText},
			{name: "name", typ: tText},
			{name: "hash", typ: tText},
			{name: "created_at", typ: tText},
			{name: "revoked_at", typ: tText, null: true},
		},
		pk:      []string{"id"},
		indexes: []index{{name: "api_keys_hash", cols: []string{"hash"}, unique: true}},
	}
	statsTable = &table{
		name: "column_stats",
		cols: []column{
			{name: "tbl", typ: tText},
			{name: "col", typ: tText},
			{name: "max_json", typ: tInt},
			{name: "max_escape", typ: tInt},
		},
		pk: []string{"tbl", "col"},
	}
	tables = []*table{datasetsTable, locationsTable, regionsTable, observationsTable, keysTable, statsTable}
)

// datasetColumn maps a Metadata field to its column.
func datasetColumn(field string) string {
	if field == "Id" {
		return "id"
	}
	return snake(field)
}

func buildDatasets() *table {
	t := &table{name: "datasets", pk: []string{"id"}}
	for _, f := range query.Metadata.Fields {
		t.cols = append(t.cols, column{name: datasetColumn(f.Name), typ: kindType(f.Kind), null: f.Nullable})
	}
	t.indexes = []index{
		{name: "datasets_doi", cols: []string{"doi"}, unique: true},
		{name: "datasets_name", cols: []string{"dataset_name", "id"}},
		{name: "datasets_created", cols: []string{"create_timestamp", "id"}},
	}
	return t
}

// locationColumn maps a Locations field to its column.
func locationColumn(field string) string {
	switch field {
	case "Id":
		return "id"
	case "ID":
		return "monitoring_location_id"
	}
	return snake(field)
}

func buildLocations() *table {
	t := &table{name: "locations", pk: []string{"id"}}
	for _, f := range query.Locations.Fields {
		t.cols = append(t.cols, column{name: locationColumn(f.Name), typ: kindType(f.Kind), null: f.Nullable})
	}
	for _, k := range regionKinds {
		t.cols = append(t.cols, column{name: k.col, typ: tText, null: true})
	}
	t.indexes = []index{
		{name: "locations_key", cols: []string{"doi", "monitoring_location_id"}, unique: true},
		{name: "locations_doi", cols: []string{"doi", "id"}},
		{name: "locations_type", cols: []string{"monitoring_location_type", "id"}},
		{name: "locations_name", cols: []string{"name", "id"}},
		{name: "locations_lat", cols: []string{"latitude", "id"}},
		{name: "locations_lon", cols: []string{"longitude", "id"}},
	}
	for _, k := range regionKinds {
		t.indexes = append(t.indexes, index{name: "locations_" + k.col, cols: []string{k.col, "id"}})
	}
	return t
}

// Columns of observations before the tail: the keys and the stored copies
// of filterable attributes (from the location, and derived).
var obsHead = []column{
	{name: "id", typ: tInt},
	{name: "doi", typ: tText},
	{name: "location_id", typ: tInt},
	{name: "monitoring_location_type", typ: tText},
	{name: "region_country", typ: tText, null: true},
	{name: "region_province", typ: tText, null: true},
	{name: "region_hub", typ: tText, null: true},
	{name: "activity_start_year", typ: tInt},
	{name: "activity_group_type", typ: tText},
}

func buildObservations() *table {
	t := &table{name: "observations", pk: []string{"id"}, cols: append([]column(nil), obsHead...)}
	for i := 0; i < TailLen; i++ {
		f := TailField(i)
		t.cols = append(t.cols, column{name: snake(f.Name), typ: kindType(f.Kind), null: f.Nullable})
	}
	// Every filterable column paired with id, so that a page of an equality
	// filter is one range scan in id order. location+characteristic serves
	// the clients' partitioned pulls (LocationId eq n and <filter>) and the
	// EXISTS probes of /Locations filters.
	pairs := []string{"doi", "location_id", "characteristic_name", "activity_media_name",
		"activity_group_type", "monitoring_location_type", "activity_start_year",
		"region_country", "region_province", "region_hub"}
	for _, c := range pairs {
		t.indexes = append(t.indexes, index{name: "observations_" + c, cols: []string{c, "id"}})
	}
	t.indexes = append(t.indexes, index{name: "observations_location_characteristic",
		cols: []string{"location_id", "characteristic_name", "id"}})
	return t
}

// level is how deep a filter field lives: on the dataset, the location or
// the observation.
type level uint8

const (
	levelDataset level = iota
	levelLocation
	levelObservation
)

// fieldLevel returns where a filter field of a collection is stored.
func fieldLevel(c *query.Collection, field string) level {
	switch field {
	case "ActivityMediaName", "ActivityGroupType", "CharacteristicName", "ActivityStartYear":
		return levelObservation
	case "LocationId", "MonitoringLocationType", "RegionId", "Name", "Latitude", "Longitude":
		return levelLocation
	case "DOI":
		return baseLevel(c)
	case "Id":
		return baseLevel(c)
	}
	return levelDataset
}

func baseLevel(c *query.Collection) level {
	switch c {
	case query.Metadata:
		return levelDataset
	case query.Locations:
		return levelLocation
	}
	return levelObservation
}

// view is how a collection's rows are read: the FROM clause and the SQL
// expression of every field, in response order.
type view struct {
	coll  *query.Collection
	table string // base table
	alias string // its alias in every statement
	joins string // joins after the base table for rows, or ""
	exprs []string
	types []colType
}

func (v *view) key() string { return v.alias + ".id" }

var views = buildViews()

func buildViews() map[*query.Collection]*view {
	out := map[*query.Collection]*view{}
	mk := func(c *query.Collection, tbl, alias, joins string, expr func(f query.Field) string) {
		v := &view{coll: c, table: tbl, alias: alias, joins: joins}
		for _, f := range c.Fields {
			v.exprs = append(v.exprs, expr(f))
			v.types = append(v.types, kindType(f.Kind))
		}
		out[c] = v
	}
	mk(query.Metadata, "datasets", "d", "", func(f query.Field) string { return "d." + datasetColumn(f.Name) })
	mk(query.Locations, "locations", "l", "", func(f query.Field) string { return "l." + locationColumn(f.Name) })
	mk(query.Observations, "observations", "o", "", func(f query.Field) string {
		if f.Name == "Id" {
			return "o.id"
		}
		return "o." + snake(f.Name)
	})
	mk(query.Records, "observations", "o",
		" JOIN locations l ON l.id = o.location_id JOIN datasets d ON d.doi = o.doi",
		func(f query.Field) string {
			switch f.Name {
			case "Id":
				return "o.id"
			case "DOI":
				return "o.doi"
			case "DatasetName":
				return "d.dataset_name"
			case "MonitoringLocationID":
				return "l.monitoring_location_id"
			case "MonitoringLocationType":
				return "l.monitoring_location_type"
			}
			if rest, ok := strings.CutPrefix(f.Name, "MonitoringLocation"); ok {
				return "l." + locationColumn(rest)
			}
			return "o." + snake(f.Name)
		})
	return out
}
