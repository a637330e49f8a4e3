package sqlstore

import (
	"strings"

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

func kindType(k query.Kind) colType {
	switch k {
	case query.KindInt:
		return tInt
	case query.KindFloat:
		return tFloat
	}
	return tText
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

// columnsOf returns the columns a field's column name stands for: itself,
// or for RegionId (which has none of its own) the region columns.
func columnsOf(col string) []string {
	if col != "" {
		return []string{col}
	}
	out := make([]string, len(regionKinds))
	for i, k := range regionKinds {
		out[i] = k.col
	}
	return out
}

var (
	datasetsTable  = buildTable(query.Metadata, index{name: "datasets_doi", cols: []string{"doi"}, unique: true})
	locationsTable = buildTable(query.Locations,
		index{name: "locations_key", cols: []string{"doi", "monitoring_location_id"}, unique: true})
	regionsTable = &table{
		name: "location_regions",
		cols: []column{{name: "location_id", typ: tInt}, {name: "region_id", typ: tText}},
		pk:   []string{"location_id", "region_id"},
		indexes: []index{
			{name: "location_regions_region", cols: []string{"region_id", "location_id"}},
		},
	}
	// location+characteristic serves the clients' partitioned pulls
	// (LocationId eq n and <filter>) and the EXISTS probes of /Locations
	// filters.
	observationsTable = buildTable(query.Observations,
		index{name: "observations_location_characteristic", cols: []string{"location_id", "characteristic_name", "id"}})
	keysTable = &table{
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

// buildTable derives the table of a collection's level from the field
// table: a column for every field the level holds (the collection's
// fields, then the filter-only fields it holds: copies and derived
// values; on observations the tail comes last), and an index (column, id)
// for every indexed filter field of the level and every copy, so that a
// page of an equality filter is one range scan in id order. keys are the
// indexes that serve no filter of their own.
func buildTable(c *query.Collection, keys ...index) *table {
	lvl := c.Level
	t := &table{name: lvl.Table(), pk: []string{"id"}, indexes: keys}
	var fields []query.Field
	if lvl == query.LevelObservation {
		head := c.Fields[:len(c.Fields)-query.TailLen]
		fields = append(append(append(fields, head...), c.FilterOnly...), query.Tail[:]...)
	} else {
		fields = append(append(fields, c.Fields...), c.FilterOnly...)
	}
	seen := map[string]bool{}
	for _, f := range fields {
		col, ok := columnOn(lvl, &f)
		if !ok || seen[col] {
			continue // not held here, or a second name of a column (LocationId and Id of /Locations)
		}
		seen[col] = true
		for _, name := range columnsOf(col) {
			t.cols = append(t.cols, column{name: name, typ: kindType(f.Kind), null: f.Nullable})
		}
		copied := f.Level != lvl
		if _, filterable := c.FilterField(f.Name); !filterable || !f.Indexed && !copied {
			continue
		}
		for _, name := range columnsOf(col) {
			ix := f.Index()
			if copied || col == "" {
				ix = lvl.Table() + "_" + name
			}
			t.indexes = append(t.indexes, index{name: ix, cols: []string{name, "id"}})
		}
	}
	return t
}

// columnOn returns the column of table lvl that holds f: its own column or
// its copy on observations.
func columnOn(lvl query.Level, f *query.Field) (string, bool) {
	switch {
	case f.Level == lvl:
		return f.Column, true
	case lvl == query.LevelObservation:
		return f.ObsColumn()
	}
	return "", false
}

// fieldRow returns the row of a field of c: a filter field or a property.
func fieldRow(c *query.Collection, name string) *query.Field {
	if f, ok := c.FilterField(name); ok {
		return f
	}
	if i, ok := c.FieldIndex(name); ok {
		return &c.Fields[i]
	}
	return nil
}

// columnIn is the SQL column of f in a statement over c whose innermost
// table in scope is depth: the collection's own table holds its fields;
// when observations are in scope they hold copies of their location's and
// dataset's filterable fields, which spares a join; otherwise the field's
// own table (joined, or in an EXISTS). For RegionId it is the alias prefix
// only ("o." or "l."): the literal picks the column.
func columnIn(c *query.Collection, depth query.Level, f *query.Field) string {
	if f.Level != c.Level && depth == query.LevelObservation {
		if col, ok := columnOn(query.LevelObservation, f); ok {
			return "o." + col
		}
	}
	return f.Level.Alias() + "." + f.Column
}

// view is how a collection's rows are read: the FROM clause, and the SQL
// expression, storage type and stored column ("table.column", whose size
// bounds apply) of every field, in response order.
type view struct {
	coll  *query.Collection
	table string // base table
	alias string // its alias in every statement
	joins string // joins after the base table for rows, or ""
	exprs []string
	types []colType
	stats []string
}

func (v *view) key() string { return v.alias + ".id" }

var views = buildViews()

// buildViews derives every collection's view. Only /Records reads fields
// of other tables: the location and dataset of each observation.
func buildViews() map[*query.Collection]*view {
	out := map[*query.Collection]*view{}
	for _, c := range query.Collections {
		v := &view{coll: c, table: c.Level.Table(), alias: c.Level.Alias()}
		var joined [query.LevelObservation]bool
		for i := range c.Fields {
			f := &c.Fields[i]
			expr := columnIn(c, c.Level, f)
			if a := f.Level.Alias(); strings.HasPrefix(expr, a+".") && f.Level < c.Level {
				joined[f.Level] = true
			}
			v.exprs = append(v.exprs, expr)
			v.types = append(v.types, kindType(f.Kind))
			v.stats = append(v.stats, f.Level.Table()+"."+f.Column)
		}
		if joined[query.LevelLocation] {
			v.joins += " JOIN locations l ON l.id = o.location_id"
		}
		if joined[query.LevelDataset] {
			v.joins += " JOIN datasets d ON d.doi = o.doi"
		}
		out[c] = v
	}
	return out
}
