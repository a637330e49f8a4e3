package gen_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/odata/values"
)

func all(t *testing.T, cfg gen.Config) (*gen.Generator, []sqlstore.Observation) {
	t.Helper()
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.NumberLocations(1)
	var out []sqlstore.Observation
	var o sqlstore.Observation
	for g.Next(&o) {
		out = append(out, o)
	}
	return g, out
}

func TestDeterministic(t *testing.T) {
	cfg := gen.Config{Rows: 5000, Seed: 42}
	g1, a := all(t, cfg)
	g2, b := all(t, cfg)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(g1.Datasets(), g2.Datasets()) || !reflect.DeepEqual(g1.Locations(), g2.Locations()) {
		t.Fatal("the same seed gave different data")
	}
	_, c := all(t, gen.Config{Rows: 5000, Seed: 43})
	if reflect.DeepEqual(a, c) {
		t.Fatal("another seed gave the same data")
	}
}

// Every generated value is one the importer accepts: vocabularies, forms,
// the ResultValue XOR ResultDetectionCondition rule, one region per kind.
func TestValuesAreValid(t *testing.T) {
	v, err := values.Load()
	if err != nil {
		t.Fatal(err)
	}
	g, rows := all(t, gen.Config{Rows: 20000, Seed: 7})
	if len(rows) != 20000 {
		t.Fatalf("%d rows", len(rows))
	}
	if n := len(g.Datasets()); n < 24 {
		t.Fatalf("%d datasets, want dozens", n)
	}
	lists := map[int]string{
		query.ActivityType: values.ActivityType, query.ActivityMediaName: values.ActivityMediaName,
		query.CharacteristicName: values.CharacteristicName, query.ResultUnit: values.ResultUnit,
		query.ResultValueType: values.ResultValueType, query.ResultDetectionCondition: values.ResultDetectionCondition,
		query.ResultStatusID: values.ResultStatusID, query.ResultSampleFraction: values.ResultSampleFraction,
		query.MethodSpeciation: values.MethodSpeciation, query.ActivityDepthHeightUnit: values.ActivityDepthHeightUnit,
		query.SampleCollectionEquipmentName:        values.SampleCollectionEquipmentName,
		query.ResultDetectionQuantitationLimitUnit: values.ResultDetectionQuantitationLimitUnit,
		query.ResultDetectionQuantitationLimitType: values.ResultDetectionQuantitationLimitType,
		query.ResultAnalyticalMethodContext:        values.ResultAnalyticalMethodContext,
	}
	chars := map[string]int{}
	nulls := make([]int, query.TailLen)
	for i := range rows {
		o := &rows[i]
		for col, list := range lists {
			if c := o.Tail[col]; c.Valid && !v.List(list).Contains(c.S) {
				t.Fatalf("row %d: %s %q is not allowed", i+1, query.Tail[col].Name, c.S)
			}
		}
		for col := 0; col < query.TailLen; col++ {
			f := query.Tail[col]
			c := o.Tail[col]
			if !c.Valid {
				nulls[col]++
				continue
			}
			switch f.Kind {
			case query.KindDate:
				if _, ok := query.ParseInstant(c.S); !ok || len(c.S) != 10 {
					t.Fatalf("row %d: %s %q", i+1, f.Name, c.S)
				}
			case query.KindTime:
				if len(c.S) != 8 || c.S[2] != ':' || c.S[5] != ':' {
					t.Fatalf("row %d: %s %q", i+1, f.Name, c.S)
				}
			}
		}
		value, cond := o.Tail[query.ResultValue].Valid, o.Tail[query.ResultDetectionCondition].Valid
		if value == cond {
			t.Fatalf("row %d: ResultValue %v and ResultDetectionCondition %v", i+1, value, cond)
		}
		if value && !o.Tail[query.ResultUnit].Valid {
			t.Fatalf("row %d: a value without a unit", i+1)
		}
		chars[o.Tail[query.CharacteristicName].S]++
	}
	// Nulls where the real data has them, values where it requires them.
	for _, col := range []int{query.ActivityEndTime, query.ResultComment, query.ResultDetectionCondition, query.ActivityStartTimeZone} {
		if nulls[col] < len(rows)/2 {
			t.Errorf("%s is null in only %d of %d rows", query.Tail[col].Name, nulls[col], len(rows))
		}
	}
	for _, col := range []int{query.ActivityType, query.CharacteristicName, query.ActivityStartDate} {
		if nulls[col] != 0 {
			t.Errorf("%s is null in %d rows", query.Tail[col].Name, nulls[col])
		}
	}
	// Common and rare characteristics: sparse filters exist.
	if chars["Temperature, water"] < len(rows)/20 || chars["Titanium"] == 0 || chars["Titanium"] > len(rows)/100 {
		t.Errorf("temperature %d, titanium %d of %d rows", chars["Temperature, water"], chars["Titanium"], len(rows))
	}
	if len(chars) < 40 {
		t.Errorf("only %d characteristics", len(chars))
	}
	// Locations: valid types, one region per kind, always the country.
	provinces := map[string]bool{}
	for _, l := range g.Locations() {
		if !v.List(values.MonitoringLocationType).Contains(l.Type) || !v.List(values.MonitoringLocationHorizontalCRS).Contains(l.HorizontalCRS) {
			t.Fatalf("location %s: type %q crs %q", l.MonitoringLocationID, l.Type, l.HorizontalCRS)
		}
		kinds := map[string]bool{}
		for _, r := range l.Regions {
			k := r[:strings.LastIndexByte(r, '.')]
			if strings.HasPrefix(r, "hub.") {
				k = "hub"
			}
			if kinds[k] {
				t.Fatalf("location %s: two regions of kind %s: %v", l.MonitoringLocationID, k, l.Regions)
			}
			kinds[k] = true
			if strings.HasPrefix(r, "admin.4.ca.") {
				provinces[r] = true
			}
		}
		if l.Regions[0] != "admin.2.ca" {
			t.Fatalf("location %s: regions %v", l.MonitoringLocationID, l.Regions)
		}
	}
	if len(provinces) < 8 {
		t.Errorf("locations in only %d provinces", len(provinces))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg gen.Config
		ok  bool
	}{
		{gen.Config{Rows: 10}, true},
		{gen.Config{Rows: -1}, false},
		{gen.Config{Rows: 10, Datasets: 5, Locations: 3}, false},
		{gen.DefaultConfig(10_000_000), true},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
	if c := gen.DefaultConfig(10_000_000); c.Datasets < 24 || c.Locations < 1000 {
		t.Errorf("10M rows: %d datasets, %d locations", c.Datasets, c.Locations)
	}
}
