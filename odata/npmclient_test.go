package odata_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/query"
)

// npmClientDir holds the pinned npm package (package-lock.json) and the
// script; `make test` installs it (make test-npm) when node_modules is
// missing.
const npmClientDir = "testdata/npmclient"

// A generic OData v4 client library from npm (Apache Olingo odatajs, as
// ts-odatajs) reads $metadata, finds the four entity sets with the
// collections' properties, types, keys and filter restrictions, and reads
// each collection, a filtered page, /$count and an entity by key, typed by
// that metadata. Missing node/npm or an uninstalled package skips loudly,
// and fails under SLUICE_REQUIRE_SERVERS=1.
func TestGenericODataClientFromNPM(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		npmUnavailable(t, "node is not installed")
	}
	if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", "ts-odatajs", "package.json")); err != nil {
		npmUnavailable(t, "the npm client is not installed: run `make test-npm` (npm ci in odata/"+npmClientDir+")")
	}
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.js", e.base, e.key)
	cmd.Dir = npmClientDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.js: %v\n%s", err, stderr.String())
	}
	var out struct {
		Sets map[string]struct {
			Key        []string
			Properties []struct {
				Name, Type string
				Nullable   bool
			}
			NonFilterable []string
		}
		Rows     map[string][]map[string]any
		Filtered struct {
			Rows []map[string]any
			Next string
		}
		Count  string
		Entity map[string]any
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("client output: %v", err)
	}
	if len(out.Sets) != 4 {
		t.Fatalf("the client found %d entity sets", len(out.Sets))
	}
	for _, coll := range allCollections {
		set, ok := out.Sets[coll.Name]
		if !ok {
			t.Fatalf("the client did not find %s", coll.Name)
		}
		if !reflect.DeepEqual(set.Key, []string{"Id"}) || len(set.Properties) != len(coll.Fields) {
			t.Fatalf("%s: key %v, %d properties", coll.Name, set.Key, len(set.Properties))
		}
		var nonFilterable []string
		for i, f := range coll.Fields {
			if set.Properties[i].Name != f.Name || (f.Kind != query.KindJSON && set.Properties[i].Nullable != f.Nullable) {
				t.Errorf("%s property %d: %+v, want %s nullable=%v", coll.Name, i, set.Properties[i], f.Name, f.Nullable)
			}
			if _, _, ok := coll.Filterable(f.Name); !ok {
				nonFilterable = append(nonFilterable, f.Name)
			}
		}
		if !reflect.DeepEqual(set.NonFilterable, nonFilterable) {
			t.Errorf("%s: the client read non-filterable %v, want %v", coll.Name, set.NonFilterable, nonFilterable)
		}
		want := e.data.expected(coll, nil)[:3]
		var got []string
		for _, r := range out.Rows[coll.Name] {
			got = append(got, fmt.Sprint(r["Id"]))
			for _, f := range coll.Fields {
				if _, ok := r[f.Name]; !ok {
					t.Errorf("%s row %v: no %s", coll.Name, r["Id"], f.Name)
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the client read ids %v, want %v", coll.Name, got, want)
		}
	}
	ph, err := query.ParseFilter(query.Observations, "CharacteristicName eq 'pH'")
	if err != nil {
		t.Fatal(err)
	}
	wantPH := e.data.expected(query.Observations, ph)
	var gotPH []string
	for _, r := range out.Filtered.Rows {
		if r["CharacteristicName"] != "pH" {
			t.Errorf("filtered row %v", r)
		}
		gotPH = append(gotPH, fmt.Sprint(r["Id"]))
	}
	if !reflect.DeepEqual(gotPH, wantPH[:5]) || !strings.Contains(out.Filtered.Next, "$skiptoken=Id%3A"+wantPH[4]) {
		t.Errorf("filtered: %v next %q, want %v", gotPH, out.Filtered.Next, wantPH[:5])
	}
	if out.Count != fmt.Sprint(len(wantPH)) {
		t.Errorf("count %q, want %d", out.Count, len(wantPH))
	}
	first := e.data.expected(query.Observations, nil)[0]
	if fmt.Sprint(out.Entity["Id"]) != first || out.Entity["@odata.context"] != e.base+"/$metadata#Observations/$entity" {
		t.Errorf("entity: %v", out.Entity)
	}
}

func npmUnavailable(t *testing.T, why string) {
	t.Helper()
	msg := "NPM ODATA CLIENT NOT AVAILABLE: " + why
	if testenv.Required() {
		t.Fatalf("%s (%s=1, so this is a failure)", msg, testenv.RequireEnv)
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, testenv.RequireEnv)
}

// Two more generic OData libraries count as their users do, on all four
// sets with and without $filter, on SQLite and PostgreSQL: @odata/client's
// count() (?$top=1&$count=true, reading @odata.count) and o.js (rows for
// $count=true, @odata.count beside them, and /$count). Each count equals
// the database's.
func TestGenericCountsFromNPM(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		npmUnavailable(t, "node is not installed")
	}
	for _, pkg := range []string{"@odata/client", "odata"} {
		if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", pkg, "package.json")); err != nil {
			npmUnavailable(t, pkg+" is not installed: run `make test-npm` (npm ci in odata/"+npmClientDir+")")
		}
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b, smallData, testOptions(), nil)
			doi := e.data.datasets[1].DOI
			type tc struct {
				Set     string `json:"set"`
				Field   string `json:"field"`
				Literal string `json:"literal"`
			}
			var cases []tc
			for _, c := range []tc{
				{Set: "Metadata", Field: "DOI", Literal: "'" + doi + "'"},
				{Set: "Locations", Field: "DOI", Literal: "'" + doi + "'"},
				{Set: "Observations", Field: "CharacteristicName", Literal: "'pH'"},
				{Set: "Records", Field: "CharacteristicName", Literal: "'pH'"},
			} {
				cases = append(cases, tc{Set: c.Set}, c)
			}
			arg, _ := json.Marshal(cases)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "counts.js", e.base, e.key, string(arg))
			cmd.Dir = npmClientDir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node counts.js: %v\n%s", err, stderr.String())
			}
			var out []struct {
				Set, Field           string
				ODataClient, OjsPath any
				OjsCount, OjsRows    any
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(cases) {
				t.Fatalf("client output %v: %s", err, stdout.String())
			}
			for i, c := range cases {
				coll := query.Collections[c.Set]
				var f query.Expr
				if c.Field != "" {
					if f, err = query.ParseFilter(coll, c.Field+" eq "+c.Literal); err != nil {
						t.Fatal(err)
					}
				}
				want := float64(len(e.data.expected(coll, f)))
				got := out[i]
				rows := min(want, 1)
				if got.ODataClient != want || got.OjsCount != want || got.OjsPath != want || got.OjsRows != rows {
					t.Errorf("%s %s: @odata/client count() %v, o.js @odata.count %v, /$count %v, rows %v; want %v (and %v rows)",
						c.Set, c.Field, got.ODataClient, got.OjsCount, got.OjsPath, got.OjsRows, want, rows)
				}
			}
		})
	}
}
