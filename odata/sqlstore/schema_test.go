package sqlstore

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata/query"
)

// TestFieldTable walks the field table of package query and checks that
// everything derived from it here agrees: every property has a view
// expression reading an existing column of the right type; every filter
// field has, at every depth a statement can reach, a column that exists on
// a table in scope; indexed filter fields and every copy on observations
// have their (column, id) index; and the observation rows the loader
// writes by hand follow the derived column order.
func TestFieldTable(t *testing.T) {
	byName := map[string]*table{}
	for _, tb := range tables {
		byName[tb.name] = tb
	}
	colOf := func(tbl, col string) (column, bool) {
		tb := byName[tbl]
		if tb == nil {
			return column{}, false
		}
		for _, c := range tb.cols {
			if c.name == col {
				return c, true
			}
		}
		return column{}, false
	}
	// exists checks a qualified column (alias.column; alias. alone for
	// RegionId, standing for the region columns).
	exists := func(t *testing.T, qualified string) {
		t.Helper()
		alias, col, _ := strings.Cut(qualified, ".")
		tbl := map[string]string{"d": "datasets", "l": "locations", "o": "observations"}[alias]
		for _, name := range columnsOf(col) {
			if _, ok := colOf(tbl, name); !ok {
				t.Errorf("%s: %s has no column %s", qualified, tbl, name)
			}
		}
	}
	hasIndex := func(tbl, col string) bool {
		for _, ix := range byName[tbl].indexes {
			if slices.Equal(ix.cols, []string{col, "id"}) {
				return true
			}
		}
		return false
	}

	for _, c := range query.Collections {
		t.Run(c.Name, func(t *testing.T) {
			v := views[c]
			if v == nil || len(v.exprs) != len(c.Fields) {
				t.Fatalf("view %+v does not cover the %d fields", v, len(c.Fields))
			}
			for i, f := range c.Fields {
				exists(t, v.exprs[i])
				if v.types[i] != kindType(f.Kind) {
					t.Errorf("%s: view type %d, kind %d", f.Name, v.types[i], f.Kind)
				}
				home, ok := colOf(f.Level.Table(), f.Column)
				if !ok {
					t.Errorf("%s: stored in %s.%s, which does not exist", f.Name, f.Level.Table(), f.Column)
				} else if home.null != f.Nullable || home.typ != kindType(f.Kind) {
					t.Errorf("%s: column %+v, field %+v", f.Name, home, f)
				}
				if v.stats[i] != f.Level.Table()+"."+f.Column {
					t.Errorf("%s: size bounds of %s", f.Name, v.stats[i])
				}
				if alias, _, _ := strings.Cut(v.exprs[i], "."); alias != c.Level.Alias() && !strings.Contains(v.joins, " "+alias+" ON") {
					t.Errorf("%s: %s read from a table the view does not join (%q)", f.Name, v.exprs[i], v.joins)
				}
			}
			for _, name := range c.FilterableNames() {
				f, _ := c.FilterField(name)
				// A filter on f reaches at least f's level; other fields
				// may take it deeper.
				for depth := max(c.Level, f.Level); depth <= query.LevelObservation; depth++ {
					col := scope{coll: c, depth: depth}.column(name)
					exists(t, col)
					alias, _, _ := strings.Cut(col, ".")
					if lvl := strings.Index("dlo", alias); lvl < 0 || query.Level(lvl) > depth {
						t.Errorf("%s at depth %d: %s is not in scope", name, depth, col)
					}
				}
				if f.Indexed {
					for _, col := range columnsOf(f.Column) {
						if !hasIndex(f.Level.Table(), col) {
							t.Errorf("%s is indexed, but %s has no index (%s, id)", name, f.Level.Table(), col)
						}
					}
				}
				if col, ok := f.ObsColumn(); ok && f.Level != query.LevelObservation {
					for _, col := range columnsOf(col) {
						if !hasIndex("observations", col) {
							t.Errorf("%s is copied onto observations, but observations has no index (%s, id)", name, col)
						}
					}
				}
			}
		})
	}

	// The tail is the end of /Observations and, but for the order of
	// the detection limit's two fields, of /Records.
	obs, rec := query.Observations.Fields, query.Records.Fields
	for i := range query.Tail {
		if obs[len(obs)-query.TailLen+i].Name != query.Tail[i].Name {
			t.Errorf("tail %d is %s, /Observations has %s", i, query.Tail[i].Name, obs[len(obs)-query.TailLen+i].Name)
		}
		if j, ok := query.Records.FieldIndex(query.Tail[i].Name); !ok || j < len(rec)-query.TailLen {
			t.Errorf("/Records lacks tail field %s", query.Tail[i].Name)
		}
		if j, ok := query.TailIndex(query.Tail[i].Name); !ok || j != i {
			t.Errorf("TailIndex(%s) = %d", query.Tail[i].Name, j)
		}
	}
	// copyObservations and its SQLite twin write these columns in this
	// order, then the tail.
	head := "id, doi, location_id, monitoring_location_type, region_country, region_province, region_hub, activity_start_year, activity_group_type, "
	var tail []string
	for _, f := range query.Tail {
		tail = append(tail, f.Column)
	}
	if want := head + strings.Join(tail, ", "); obsColumnList != want {
		t.Errorf("observation columns\n got %s\nwant %s", obsColumnList, want)
	}
}
