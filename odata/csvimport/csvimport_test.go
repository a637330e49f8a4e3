package csvimport_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/csvimport"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.WithSharedStop(m))
}

func open(t *testing.T) *sqlstore.DB {
	t.Helper()
	return openDSN(t, "sqlite:"+filepath.Join(t.TempDir(), "s.sqlite"))
}

func openDSN(t *testing.T, dsn string) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// stores are the import targets: SQLite, and PostgreSQL (rows go in with COPY).
func stores(t *testing.T) map[string]func(t *testing.T) *sqlstore.DB {
	return map[string]func(t *testing.T) *sqlstore.DB{
		"sqlite": open,
		"postgres": func(t *testing.T) *sqlstore.DB {
			return openDSN(t, testenv.SharedPostgres(t).CreateDatabase(t, t.Name()))
		},
	}
}

// readAll reads every row of a collection through the store's page API.
func readAll(t *testing.T, db *sqlstore.DB, coll *query.Collection, filter string) [][]string {
	t.Helper()
	ctx := context.Background()
	params := []query.Param{{Name: "$top", Value: "500"}}
	if filter != "" {
		params = append(params, query.Param{Name: "$filter", Value: filter})
	}
	q, err := query.Parse(coll, params)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for {
		p, err := db.Probe(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := db.Rows(ctx, q, p)
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next() {
			var rec []string
			for i, v := range cur.Values() {
				rec = append(rec, cellText(coll.Fields[q.Fields[i]].Kind, v))
			}
			out = append(out, rec)
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		cur.Close()
		if !p.More {
			return out
		}
		q.After = p.Last
	}
}

func cellText(k query.Kind, v query.Value) string {
	if v.Null {
		return ""
	}
	switch k {
	case query.KindInt:
		return fmt.Sprint(v.Int)
	case query.KindFloat:
		return string(jsonenc.AppendFloat(nil, v.Float))
	}
	return string(v.Bytes)
}

// export writes a dataset as a CSV of all /Records columns and a metadata
// file, as a user streaming /Records into a CSV would have it.
func export(t *testing.T, db *sqlstore.DB, dir string, ds *sqlstore.Dataset, regions map[string][]string) csvimport.Dataset {
	t.Helper()
	csvPath := filepath.Join(dir, strings.ReplaceAll(ds.DOI, "/", "_")+".csv")
	f, err := os.Create(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	w := csv.NewWriter(f)
	var header []string
	for _, fl := range query.Records.Fields {
		header = append(header, fl.Name)
	}
	w.Write(header)
	for _, rec := range readAll(t, db, query.Records, "DOI eq '"+ds.DOI+"'") {
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	meta := csvimport.Metadata{Dataset: *ds, Regions: regions}
	b, _ := json.MarshalIndent(meta, "", "  ")
	metaPath := strings.TrimSuffix(csvPath, ".csv") + ".json"
	if err := os.WriteFile(metaPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return csvimport.Dataset{Metadata: metaPath, CSV: []string{csvPath}}
}

func generated(t *testing.T) (*sqlstore.DB, *gen.Generator, []csvimport.Dataset) {
	t.Helper()
	src := open(t)
	g, err := gen.New(gen.Config{Rows: 2500, Datasets: 4, Locations: 30, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Load(context.Background(), src, g, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var sets []csvimport.Dataset
	for _, ds := range g.Datasets() {
		regions := map[string][]string{}
		for _, l := range g.Locations() {
			if l.DOI == ds.DOI {
				regions[l.MonitoringLocationID] = l.Regions
			}
		}
		sets = append(sets, export(t, src, dir, ds, regions))
	}
	return src, g, sets
}

// Export through the page API, import, and read back: every collection is
// identical, Ids included (rows are numbered in file order).
func TestRoundTrip(t *testing.T) {
	src, _, sets := generated(t)
	for name, openStore := range stores(t) {
		t.Run(name, func(t *testing.T) { roundTrip(t, src, sets, openStore(t)) })
	}
}

func roundTrip(t *testing.T, src *sqlstore.DB, sets []csvimport.Dataset, dst *sqlstore.DB) {
	var calls int
	res, err := csvimport.Import(context.Background(), dst, sets, func(done, total int64) {
		calls++
		if done > total {
			t.Errorf("progress %d of %d", done, total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Observations != 2500 || res.Datasets != 4 || res.Locations != 30 || calls == 0 {
		t.Fatalf("result %+v, %d progress calls", res, calls)
	}
	// Records flatten each observation's dataset and location in, so they
	// must come back identical. Location Ids are numbered in file order on
	// import, so /Locations is compared without them.
	for _, coll := range []*query.Collection{query.Metadata, query.Records} {
		a, b := readAll(t, src, coll, ""), readAll(t, dst, coll, "")
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s differs after a round trip (%d vs %d rows)", coll.Name, len(a), len(b))
		}
	}
	withoutID := func(rows [][]string) []string {
		var out []string
		for _, r := range rows {
			out = append(out, strings.Join(r[1:], "\x00"))
		}
		sort.Strings(out)
		return out
	}
	if a, b := withoutID(readAll(t, src, query.Locations, "")), withoutID(readAll(t, dst, query.Locations, "")); !reflect.DeepEqual(a, b) {
		t.Fatalf("Locations differ after a round trip")
	}
	// Regions came through the metadata file.
	for _, r := range []string{"RegionId eq 'admin.2.ca'", "RegionId eq 'hub.atlantic'", "RegionId eq 'admin.4.ca.on'"} {
		if a, b := readAll(t, src, query.Records, r), readAll(t, dst, query.Records, r); !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: %d vs %d rows", r, len(a), len(b))
		}
	}
}

// rewrite replaces one cell (line is 1-based, counting the header) of a CSV.
func rewrite(t *testing.T, path string, line int, column, value string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range recs[0] {
		if h == column {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("no column %s", column)
	}
	recs[line-1][col] = value
	out, _ := os.Create(path)
	w := csv.NewWriter(out)
	w.WriteAll(recs)
	out.Close()
}

func TestBadValues(t *testing.T) {
	_, _, sets := generated(t)
	for _, tc := range []struct {
		line   int
		column string
		value  string
		msg    string
	}{
		{7, "ActivityStartDate", "2020-13-01", `"2020-13-01" is not a date (YYYY-MM-DD)`},
		{3, "ResultValue", "seven", `"seven" is not a number`},
		{12, "CharacteristicName", "Unobtainium", `"Unobtainium" is not an allowed value`},
		{5, "ActivityType", "", "a value is required"},
		{4, "ActivityStartTime", "25:00", `"25:00" is not a time`},
		{9, "MonitoringLocationLatitude", "91", "is not a latitude"},
		{2, "DOI", "10.25976/other", "differs from the metadata's DOI"},
		{6, "MonitoringLocationName", "Somewhere else", "described differently"},
		{8, "ResultComment", `=HYPERLINK("http://evil.example","click")`, "would run as a formula in a spreadsheet"},
		{10, "ResultComment", "@SUM(1)", "would run as a formula"},
		{11, "ResultComment", "-1+1", "would run as a formula"},
		{3, "ResultComment", "\tcmd", "would run as a formula"},
	} {
		// Each case works on a fresh copy of the first dataset's files.
		dir := t.TempDir()
		set := copySet(t, sets[0], dir)
		rewrite(t, set.CSV[0], tc.line, tc.column, tc.value)
		if tc.column == "ResultValue" {
			// keep the XOR rule satisfied so the number check is what fails
			rewrite(t, set.CSV[0], tc.line, "ResultDetectionCondition", "")
		}
		if tc.column == "MonitoringLocationName" {
			// make line 6 a second row of line 2's location
			copyLocation(t, set.CSV[0], 2, tc.line)
			rewrite(t, set.CSV[0], tc.line, tc.column, tc.value)
		}
		dst := open(t)
		_, err := csvimport.Import(context.Background(), dst, []csvimport.Dataset{set}, nil)
		var le *csvimport.LineError
		if !errors.As(err, &le) {
			t.Fatalf("%s=%q: err %v is not a LineError", tc.column, tc.value, err)
		}
		want := fmt.Sprintf("%s:%d: column %s: ", set.CSV[0], tc.line, tc.column)
		if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("error %q, want %q...%q", err, want, tc.msg)
		}
		if empty, _ := dst.Empty(context.Background()); !empty {
			t.Errorf("%s: a failed import left rows", tc.column)
		}
	}
}

func copySet(t *testing.T, s csvimport.Dataset, dir string) csvimport.Dataset {
	t.Helper()
	cp := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, filepath.Base(p))
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return csvimport.Dataset{Metadata: cp(s.Metadata), CSV: []string{cp(s.CSV[0])}}
}

// copyLocation copies the location columns of line from to line to.
func copyLocation(t *testing.T, path string, from, to int) {
	f, _ := os.Open(path)
	recs, _ := csv.NewReader(f).ReadAll()
	f.Close()
	for i, h := range recs[0] {
		if strings.HasPrefix(h, "MonitoringLocation") {
			recs[to-1][i] = recs[from-1][i]
		}
	}
	out, _ := os.Create(path)
	w := csv.NewWriter(out)
	w.WriteAll(recs)
	out.Close()
}

// A failure inside the transaction (the DOI is already loaded) leaves the
// store exactly as it was.
func TestFailedImportLeavesStore(t *testing.T) {
	_, _, sets := generated(t)
	for name, openStore := range stores(t) {
		t.Run(name, func(t *testing.T) { failedImport(t, sets, openStore(t)) })
	}
}

func failedImport(t *testing.T, sets []csvimport.Dataset, dst *sqlstore.DB) {
	if _, err := csvimport.Import(context.Background(), dst, sets[:1], nil); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, dst, query.Records, "")
	_, err := csvimport.Import(context.Background(), dst, []csvimport.Dataset{sets[1], sets[0]}, nil)
	if err == nil || !strings.Contains(err.Error(), "already in the store") {
		t.Fatalf("err = %v", err)
	}
	if after := readAll(t, dst, query.Records, ""); !reflect.DeepEqual(before, after) {
		t.Fatalf("the store changed: %d rows before, %d after", len(before), len(after))
	}
	if n := len(readAll(t, dst, query.Metadata, "")); n != 1 {
		t.Fatalf("%d datasets after a failed import", n)
	}
}

func TestHeaderErrors(t *testing.T) {
	dir := t.TempDir()
	meta := filepath.Join(dir, "m.json")
	os.WriteFile(meta, []byte(`{"DOI":"10.1/x","DatasetName":"X","CreateTimestamp":"2020-01-01","PublishedTimestamp":"2020-01-02"}`), 0o644)
	for _, tc := range []struct{ content, want string }{
		{"", "the file is empty"},
		{"MonitoringLocationID,Bogus\n", "column Bogus: unknown column"},
		{"MonitoringLocationID,MonitoringLocationID\n", "appears twice"},
		{"MonitoringLocationID\n", "column MonitoringLocationName: required column is missing"},
	} {
		p := filepath.Join(dir, "d.csv")
		os.WriteFile(p, []byte(tc.content), 0o644)
		_, err := csvimport.Import(context.Background(), open(t), []csvimport.Dataset{{Metadata: meta, CSV: []string{p}}}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p+":1: ") {
			t.Errorf("%q: err %v, want %q", tc.content, err, tc.want)
		}
	}
	os.WriteFile(meta, []byte(`{"DOI":"10.1/x","DatasetName":"X","Licence":"y","Lisence":"z"}`), 0o644)
	if _, err := csvimport.ReadMetadata(meta); err == nil || !strings.Contains(err.Error(), "Lisence") {
		t.Errorf("misspelt metadata field: %v", err)
	}
}
