package odata_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata/query"
)

var allCollections = []*query.Collection{query.Metadata, query.Locations, query.Observations, query.Records}

// Every answer, whatever its status, says OData-Version: 4.0.
func TestODataVersionOnEveryResponse(t *testing.T) {
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	c := newClient(t)
	for _, tc := range []struct {
		method, path string
		headers      []string
		status       int
	}{
		{"GET", "/Observations?$top=2", []string{"x-api-key", e.key}, 200},
		{"GET", "", []string{"x-api-key", e.key}, 200},
		{"GET", "/$metadata", []string{"x-api-key", e.key}, 200},
		{"GET", "/Observations/$count", []string{"x-api-key", e.key}, 200},
		{"GET", "/Observations(1)", []string{"x-api-key", e.key}, 200},
		{"HEAD", "/Observations?$top=2", []string{"x-api-key", e.key}, 200},
		{"GET", "/Observations?$filter=Nope%20eq%201", []string{"x-api-key", e.key}, 400},
		{"GET", "/Observations?$filter=%zz", []string{"x-api-key", e.key}, 400},
		{"GET", "/Observations", nil, 401},
		{"GET", "/Observations", []string{"x-api-key", "wrong"}, 403},
		{"GET", "/Nothing", []string{"x-api-key", e.key}, 404},
		{"GET", "/Observations(999999)", []string{"x-api-key", e.key}, 404},
		{"POST", "/Observations", []string{"x-api-key", e.key}, 405},
		{"OPTIONS", "/Observations", nil, 204},
	} {
		r := do(t, c, tc.method, e.base+tc.path, tc.headers...)
		if r.status != tc.status || r.header.Get("OData-Version") != "4.0" {
			t.Errorf("%s %s: %d (want %d), OData-Version %q", tc.method, tc.path, r.status, tc.status, r.header.Get("OData-Version"))
		}
	}
}

// The CSDL documents the four entity sets with exactly the collections'
// fields, in order, their types and nullability, and which are filterable.
func TestMetadataDocument(t *testing.T) {
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	c := newClient(t)
	edm := map[query.Kind]string{query.KindString: "Edm.String", query.KindInt: "Edm.Int64", query.KindFloat: "Edm.Double",
		query.KindDate: "Edm.Date", query.KindTime: "Edm.TimeOfDay", query.KindTimestamp: "Edm.DateTimeOffset", query.KindJSON: "Collection(Edm.String)"}
	wantType := func(coll *query.Collection, f query.Field) string {
		if coll.UUIDKey && f.Name == "Id" {
			return "Edm.Guid"
		}
		return edm[f.Kind]
	}
	nonFilterable := func(coll *query.Collection) []string {
		var out []string
		for _, f := range coll.Fields {
			if _, _, ok := coll.Filterable(f.Name); !ok {
				out = append(out, f.Name)
			}
		}
		return out
	}

	r := e.get(c, e.base+"/$metadata")
	if r.status != 200 || r.header.Get("Content-Type") != "application/xml; charset=utf-8" {
		t.Fatalf("$metadata: %d %v", r.status, r.header)
	}
	var doc struct {
		Version  string `xml:"Version,attr"`
		Services struct {
			Schema struct {
				Namespace string `xml:"Namespace,attr"`
				Types     []struct {
					Name  string   `xml:"Name,attr"`
					Key   []string `xml:"Key>PropertyRef>Name"`
					Props []struct {
						Name     string `xml:"Name,attr"`
						Type     string `xml:"Type,attr"`
						Nullable string `xml:"Nullable,attr"`
					} `xml:"Property"`
				} `xml:"EntityType"`
				Container struct {
					Sets []struct {
						Name        string `xml:"Name,attr"`
						EntityType  string `xml:"EntityType,attr"`
						Annotations []struct {
							Term  string   `xml:"Term,attr"`
							Paths []string `xml:"Record>PropertyValue>Collection>PropertyPath"`
						} `xml:"Annotation"`
					} `xml:"EntitySet"`
				} `xml:"EntityContainer"`
			} `xml:"Schema"`
		} `xml:"DataServices"`
	}
	if err := xml.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("$metadata is not XML: %v", err)
	}
	// encoding/xml ignores the PropertyRef's attribute path above; read keys
	// by pattern instead.
	if n := strings.Count(string(r.body), `<PropertyRef Name="Id"/>`); n != 4 || doc.Version != "4.0" {
		t.Fatalf("keys %d, version %q", n, doc.Version)
	}
	sets := doc.Services.Schema.Container.Sets
	if len(sets) != 4 {
		t.Fatalf("%d entity sets", len(sets))
	}
	for i, coll := range allCollections {
		set := sets[i]
		if set.Name != coll.Name {
			t.Fatalf("set %d is %s, want %s", i, set.Name, coll.Name)
		}
		typeName := strings.TrimPrefix(set.EntityType, doc.Services.Schema.Namespace+".")
		found := false
		for _, et := range doc.Services.Schema.Types {
			if et.Name != typeName {
				continue
			}
			found = true
			if len(et.Props) != len(coll.Fields) {
				t.Fatalf("%s: %d properties, want %d", coll.Name, len(et.Props), len(coll.Fields))
			}
			for j, f := range coll.Fields {
				p := et.Props[j]
				nullable := p.Nullable != "false"
				if p.Name != f.Name || p.Type != wantType(coll, f) || (f.Kind != query.KindJSON && nullable != f.Nullable) {
					t.Errorf("%s property %d: %+v, want %s %s nullable=%v", coll.Name, j, p, f.Name, wantType(coll, f), f.Nullable)
				}
			}
		}
		if !found {
			t.Fatalf("%s: entity type %s missing", coll.Name, set.EntityType)
		}
		var got []string
		for _, a := range set.Annotations {
			if a.Term == "Capabilities.FilterRestrictions" {
				got = a.Paths
			}
		}
		if want := nonFilterable(coll); !reflect.DeepEqual(got, want) {
			t.Errorf("%s NonFilterableProperties\n got %v\nwant %v", coll.Name, got, want)
		}
	}

	// CSDL JSON: asked by $format or by Accept, the same content.
	for _, how := range [][]string{{"/$metadata?$format=json"}, {"/$metadata", "Accept", "application/json"}} {
		r := e.get(c, e.base+how[0], how[1:]...)
		if r.status != 200 || r.header.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("%v: %d %v", how, r.status, r.header)
		}
		var j map[string]any
		if err := json.Unmarshal(r.body, &j); err != nil {
			t.Fatalf("%v: %v", how, err)
		}
		ns := j["DataStream"].(map[string]any)
		cont := ns["Default"].(map[string]any)
		for _, coll := range allCollections {
			set := cont[coll.Name].(map[string]any)
			typ := ns[strings.TrimPrefix(set["$Type"].(string), "DataStream.")].(map[string]any)
			for _, f := range coll.Fields {
				p, ok := typ[f.Name].(map[string]any)
				if !ok {
					t.Fatalf("%v %s: property %s missing", how, coll.Name, f.Name)
				}
				typ := p["$Type"].(string)
				if p["$Collection"] == true {
					typ = "Collection(" + typ + ")"
				}
				if typ != wantType(coll, f) || p["$Nullable"] != f.Nullable {
					t.Errorf("%v %s.%s: %v", how, coll.Name, f.Name, p)
				}
			}
			var got []string
			for _, n := range set["@Capabilities.FilterRestrictions"].(map[string]any)["NonFilterableProperties"].([]any) {
				got = append(got, n.(string))
			}
			if want := nonFilterable(coll); !reflect.DeepEqual(got, want) {
				t.Errorf("%v %s NonFilterableProperties %v, want %v", how, coll.Name, got, want)
			}
		}
	}
	if r := e.get(c, e.base+"/$metadata?$top=1"); r.status != 400 {
		t.Errorf("$metadata?$top=1: %d", r.status)
	}
}

// /<Collection>/$count is the plain number of matching rows, for every
// documented filter form on both stores; entity by key gives the row the
// oracle has, with its context, or 404.
func TestCountPathAndEntityByKey(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b, smallData, testOptions(), nil)
			c := newClient(t)
			for _, fc := range e.filterCases() {
				parsed, err := query.ParseFilter(fc.coll, fc.filter)
				if err != nil {
					t.Fatal(err)
				}
				want := len(e.data.expected(fc.coll, parsed))
				u := e.base + "/" + fc.coll.Name + "/$count"
				if fc.filter != "" {
					u += "?$filter=" + url.QueryEscape(fc.filter)
				}
				r := e.get(c, u)
				if r.status != 200 || string(r.body) != fmt.Sprint(want) || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
					t.Errorf("%s: %d %q %s, want %d", u, r.status, r.body, r.header.Get("Content-Type"), want)
				}
			}

			for _, coll := range allCollections {
				all := e.data.expected(coll, nil)
				for _, id := range []string{all[0], all[len(all)/2], all[len(all)-1]} {
					key := id
					if coll.UUIDKey {
						key = "'" + strings.ToUpper(id) + "'"
					}
					r := e.get(c, e.base+"/"+coll.Name+"("+key+")")
					if r.status != 200 {
						t.Fatalf("%s(%s): %d %s", coll.Name, key, r.status, r.body)
					}
					dec := json.NewDecoder(bytes.NewReader(r.body))
					dec.UseNumber()
					var got map[string]any
					if err := dec.Decode(&got); err != nil {
						t.Fatal(err)
					}
					if ctxURL := e.base + "/$metadata#" + coll.Name + "/$entity"; got["@odata.context"] != ctxURL {
						t.Errorf("%s(%s): context %v, want %s", coll.Name, key, got["@odata.context"], ctxURL)
					}
					delete(got, "@odata.context")
					if want := e.data.rowOf(coll, id); !reflect.DeepEqual(got, want) {
						t.Errorf("%s(%s):\n got %v\nwant %v", coll.Name, key, got, want)
					}
				}
			}
			obsLast := len(e.data.obs)
			meta := e.data.datasets[0].ID
			for _, tc := range []struct {
				path   string
				status int
				body   string
			}{
				{"/Observations(Id=7)?$select=DOI,Id", 200, `{"@odata.context":"` + e.base + `/$metadata#Observations(Id,DOI)/$entity","Id":7,"DOI":"` + e.data.obs[6].DOI + `"}`},
				{"/Metadata(" + meta + ")?$select=Id", 200, `{"@odata.context":"` + e.base + `/$metadata#Metadata(Id)/$entity","Id":"` + meta + `"}`},
				{fmt.Sprintf("/Observations(%d)", obsLast+1), 404, "no row of /Observations has the Id"},
				{"/Observations(0)", 404, "no row of /Observations"},
				{"/Metadata('00000000-0000-4000-8000-000000000000')", 404, "no row of /Metadata"},
				{"/Observations('x')", 400, "the key of /Observations is an integer Id"},
				{"/Observations(-1)", 400, "the key of /Observations is an integer Id"},
				{"/Metadata(5)", 400, "the key of /Metadata is a UUID"},
				{"/Observations(1)?$top=1", 400, "$top does not apply to a single entity"},
				{"/Observations(1)?$select=Nope", 400, `$select: unknown field \"Nope\"`},
				{"/Observations(1)?$format=csv", 400, "$format=csv applies to collections"},
				{"/Nothing(1)", 404, "no such resource"},
			} {
				r := e.get(c, e.base+tc.path)
				if r.status != tc.status || !strings.Contains(string(r.body), tc.body) {
					t.Errorf("%s: %d %s, want %d with %q", tc.path, r.status, r.body, tc.status, tc.body)
				}
			}
		})
	}
}

// @odata.context and @odata.count appear only for clients that announce
// OData; the DataStream clients' pages stay exactly as the compatibility
// spec has them (decodePage is strict about members).
func TestODataContext(t *testing.T) {
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	c := newClient(t)
	plain := e.get(c, e.base+"/Observations?$top=3&$select=Id,DOI", "Accept", "application/vnd.api+json")
	decodePage(t, plain.body)
	// $count=true: DataStream's form for what DataStream clients send,
	// OData's inline count for everyone else.
	dsForm := fmt.Sprintf(`{"value":"%d"}`, len(e.data.obs))
	inline := fmt.Sprintf(`{"@odata.count":%d,"value":[{"Id":1},{"Id":2},{"Id":3}],"@odata.nextLink":`, len(e.data.obs))
	for _, tc := range []struct {
		query   string
		headers []string
		ds      bool
	}{
		{"", []string{"Accept", "application/vnd.api+json"}, true},
		{"", []string{"Accept", "*/*"}, true},
		{"", []string{"Accept", "text/html, application/vnd.api+json;q=0.9"}, true},
		{"", nil, false},
		{"", []string{"Accept", "application/json"}, false},
		{"", []string{"Accept", "application/json, text/plain"}, false},
		{"", []string{"Accept", "application/vnd.api+json", "OData-Version", "4.0"}, false},
		{"", []string{"Accept", "*/*", "OData-MaxVersion", "4.01"}, false},
		{"", []string{"Accept", "*/*", "Content-Type", "application/json"}, false},
		{"", []string{"Accept", "application/vnd.api+json", "Content-Type", "application/json"}, true},
		{"&$format=json", []string{"Accept", "*/*"}, false},
		{"&$format=csv", []string{"Accept", "application/json"}, true},
	} {
		r := e.get(c, e.base+"/Observations?$top=3&$select=Id&$count=true"+tc.query, tc.headers...)
		switch {
		case tc.ds && string(r.body) != dsForm:
			t.Errorf("%v %s: %.200s, want %s", tc.headers, tc.query, r.body, dsForm)
		case !tc.ds && !bytes.HasPrefix(r.body, []byte(inline)) && !bytes.Contains(r.body, []byte(`"@odata.count":`+strconv.Itoa(len(e.data.obs))+`,"value":[{"Id":1},{"Id":2},{"Id":3}]`)):
			t.Errorf("%v %s: %.300s, want @odata.count beside the rows", tc.headers, tc.query, r.body)
		}
	}
	ctxPrefix := `{"@odata.context":"` + e.base + `/$metadata#Observations(Id,DOI)","value":[`
	for _, h := range [][]string{{"OData-MaxVersion", "4.0"}, {"OData-Version", "4.0"}, {"Accept", "application/json;odata.metadata=minimal"}} {
		r := e.get(c, e.base+"/Observations?$top=3&$select=Id,DOI", h...)
		if !bytes.HasPrefix(r.body, []byte(ctxPrefix)) {
			t.Errorf("%v: body %.200s", h, r.body)
		}
		rest := append([]byte(`{"value":[`), r.body[len(ctxPrefix):]...)
		if !bytes.Equal(rest, plain.body) {
			t.Errorf("%v: rows or link differ from the plain page", h)
		}
	}
	if r := e.get(c, e.base+"/Observations?$top=3&$select=Id,DOI", "OData-MaxVersion", "4.0", "Accept", "application/json;odata.metadata=none"); !bytes.Equal(r.body, plain.body) {
		t.Errorf("odata.metadata=none: %.200s", r.body)
	}
	r := e.get(c, e.base+"/Observations?$top=3&$select=Id&$count=true", "OData-MaxVersion", "4.0")
	want := fmt.Sprintf(`{"@odata.context":"%s/$metadata#Observations(Id)","@odata.count":%d,"value":[{"Id":1},{"Id":2},{"Id":3}],"@odata.nextLink":`, e.base, len(e.data.obs))
	if !bytes.HasPrefix(r.body, []byte(want)) {
		t.Errorf("OData $count=true:\n got %.300s\nwant %s", r.body, want)
	}
	root := e.get(c, e.base)
	var doc struct {
		Context string `json:"@odata.context"`
		Value   []struct{ Name, Kind, URL string }
	}
	if err := json.Unmarshal(root.body, &doc); err != nil || doc.Context != e.base+"/$metadata" || len(doc.Value) != 4 {
		t.Errorf("service document: %v %s", err, root.body)
	}
}

// CSV pages hold the same rows as JSON pages, columns in field order,
// RFC 4180 quoting, the same paging through the Link header, and any
// content coding.
func TestCSV(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // each backend has its own store and server
			e := newEnv(t, b, smallData, testOptions(), nil)
			c := newClient(t)
			for _, coll := range allCollections {
				for _, sel := range []string{"", "&$select=Id,DOI"} {
					top := 700
					first := fmt.Sprintf("%s/%s?$top=%d%s", e.base, coll.Name, top, sel)
					jsonRows := e.pull(c, coll, first, top)
					for _, how := range [][]string{{"&$format=csv"}, {"", "Accept", "text/csv"}, {"&$format=csv", "Accept-Encoding", "br"}} {
						header, records := e.pullCSV(c, first+how[0], top, how[1:]...)
						var want []string
						for _, i := range mustParse(t, coll, sel).Fields {
							want = append(want, coll.Fields[i].Name)
						}
						if !reflect.DeepEqual(header, want) {
							t.Fatalf("%s %v: header %v, want %v", coll.Name, how, header, want)
						}
						if len(records) != len(jsonRows) {
							t.Fatalf("%s %v: %d CSV rows, %d JSON rows", coll.Name, how, len(records), len(jsonRows))
						}
						for i, rec := range records {
							for j, name := range header {
								if got, want := rec[j], csvCell(t, jsonRows[i].vals[name]); got != want {
									t.Fatalf("%s %v row %d %s: %q, want %q", coll.Name, how, i, name, got, want)
								}
							}
						}
					}
				}
			}
			// JSON wins when Accept ranks it higher, or $format says so.
			for _, h := range [][]string{{"Accept", "application/json, text/csv;q=0.5"}, {"Accept", "text/csv;q=0"}} {
				if r := e.get(c, e.base+"/Locations?$top=1", h...); r.header.Get("Content-Type") != "application/json; charset=utf-8" {
					t.Errorf("%v: %s", h, r.header.Get("Content-Type"))
				}
			}
			if r := e.get(c, e.base+"/Locations?$top=1&$format=json", "Accept", "text/csv"); r.header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("$format=json with Accept text/csv: %s", r.header.Get("Content-Type"))
			}
		})
	}
}

func mustParse(t *testing.T, c *query.Collection, raw string) *query.Query {
	t.Helper()
	ps, err := query.Decode([]byte(strings.TrimPrefix(raw, "&")))
	if err != nil {
		t.Fatal(err)
	}
	q, err := query.Parse(c, ps)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

var linkRE = regexp.MustCompile(`^<([^>]+)>; rel="next"$`)

// pullCSV follows Link headers from first and returns the header line and
// every record, checking each page is text/csv with the same header.
func (e *env) pullCSV(c *http.Client, first string, top int, headers ...string) ([]string, [][]string) {
	e.t.Helper()
	var header []string
	var out [][]string
	u := first
	for pages := 0; u != ""; pages++ {
		if pages > 1000 {
			e.t.Fatal("more than 1000 CSV pages")
		}
		r := e.get(c, u, headers...)
		if r.status != 200 || r.header.Get("Content-Type") != "text/csv; charset=utf-8; header=present" {
			e.t.Fatalf("GET %s: %d %s %.200s", u, r.status, r.header.Get("Content-Type"), r.body)
		}
		cr := csv.NewReader(bytes.NewReader(r.body))
		cr.ReuseRecord = false
		recs, err := cr.ReadAll()
		if err != nil {
			e.t.Fatalf("GET %s: not RFC 4180 CSV: %v", u, err)
		}
		if !bytes.HasSuffix(r.body, []byte("\r\n")) {
			e.t.Fatalf("GET %s: lines do not end in CRLF", u)
		}
		if len(recs) == 0 || len(recs)-1 > top {
			e.t.Fatalf("GET %s: %d records", u, len(recs))
		}
		if header != nil && !reflect.DeepEqual(recs[0], header) {
			e.t.Fatalf("GET %s: header changed", u)
		}
		header = recs[0]
		out = append(out, recs[1:]...)
		u = ""
		if l := r.header.Get("Link"); l != "" {
			m := linkRE.FindStringSubmatch(l)
			if m == nil {
				e.t.Fatalf("Link %q", l)
			}
			u = m[1]
		}
	}
	return header, out
}

// csvCell is how a JSON value is written in CSV: null empty, numbers and
// strings as they are, arrays as compact JSON.
func csvCell(t *testing.T, v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
