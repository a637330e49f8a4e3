package odata_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata/query"
)

// pull follows next links from a first URL and returns every row, checking
// the paging contract on each page: at most $top rows, Ids increasing, the
// Link header equal to the body's link, no link on the last page and no
// empty page after a link.
func (e *env) pull(c *http.Client, coll *query.Collection, first string, top int) []row {
	e.t.Helper()
	var out []row
	url := first
	last := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatalf("%s: more than 10000 pages", first)
		}
		r := e.get(c, url)
		if r.status != 200 {
			e.t.Fatalf("GET %s: %d %s", url, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			e.t.Fatalf("GET %s: Content-Type %q", url, ct)
		}
		p := decodePage(e.t, r.body)
		if len(p.rows) > top {
			e.t.Fatalf("GET %s: %d rows, more than $top %d", url, len(p.rows), top)
		}
		if pages > 0 && len(p.rows) == 0 {
			e.t.Fatalf("GET %s: a next link led to an empty page", url)
		}
		for _, rw := range p.rows {
			id := fmt.Sprint(rw.vals["Id"])
			if last != "" && !idLess(coll, last, id) {
				e.t.Fatalf("GET %s: Id %s does not follow %s", url, id, last)
			}
			last = id
		}
		out = append(out, p.rows...)
		link := r.header.Get("Link")
		if !p.has {
			if link != "" {
				e.t.Fatalf("GET %s: Link header %q without @odata.nextLink", url, link)
			}
			return out
		}
		if want := "<" + p.next + `>; rel="next"`; link != want {
			e.t.Fatalf("GET %s: Link header %q, body link %q", url, link, p.next)
		}
		if len(p.rows) != top {
			e.t.Fatalf("GET %s: a page of %d rows (< $top %d) has a next link", url, len(p.rows), top)
		}
		url = p.next
	}
}

func idLess(c *query.Collection, a, b string) bool {
	if c.UUIDKey {
		return a < b
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func ids(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r.vals["Id"])
	}
	return out
}

type filterCase struct {
	coll   *query.Collection
	filter string
	top    int
}

// filterCases are the documented filter forms on every collection.
func (e *env) filterCases() []filterCase {
	ds := e.data.datasets
	doi, doi2 := ds[1].DOI, ds[3].DOI
	loc := e.data.locations[4]
	return []filterCase{
		{query.Observations, "", 700},
		{query.Observations, "CharacteristicName eq 'pH'", 150},
		{query.Observations, "CharacteristicName eq 'Titanium'", 2},
		{query.Observations, "CharacteristicName in ('pH','Titanium','Temperature, water')", 200},
		{query.Observations, "DOI eq '" + doi + "'", 300},
		{query.Observations, "endswith(DOI, '" + doi2[len(doi2)-4:] + "')", 300},
		{query.Observations, "startswith(CharacteristicName, 'Tot') or contains(CharacteristicName,'oxygen')", 100},
		{query.Observations, fmt.Sprintf("LocationId eq '%d'", loc.ID), 20},
		{query.Observations, fmt.Sprintf("LocationId eq %d and CharacteristicName eq 'pH'", loc.ID), 3},
		{query.Observations, "ActivityStartYear lt '2008'", 400},
		{query.Observations, "ActivityStartYear ge 2015 and ActivityStartYear le 2018", 250},
		{query.Observations, "ActivityStartDateYear eq 2012", 50},
		{query.Observations, "ActivityGroupType eq 'Lab Sample'", 300},
		{query.Observations, "ActivityMediaName eq 'Groundwater'", 50},
		{query.Observations, "MonitoringLocationType eq 'Lake/Pond'", 300},
		{query.Observations, "RegionId eq 'hub.atlantic'", 300},
		{query.Observations, "RegionId eq 'admin.4.ca.on'", 300},
		{query.Observations, "RegionId ne 'hub.pacific'", 500},
		{query.Observations, "RegionId in ('hub.pacific','hub.mackenzie')", 200},
		{query.Observations, "RegionId eq 'admin.2.ca'", 1000},
		{query.Observations, "RegionId eq 'nowhere'", 10},
		{query.Observations, "(RegionId eq 'hub.atlantic' or CharacteristicName eq 'pH') and ActivityStartYear gt 2005", 200},
		{query.Observations, "CharacteristicName ne 'pH' and DOI ne '" + doi + "'", 500},
		{query.Records, "", 500},
		{query.Records, "CharacteristicName eq 'Titanium' or ActivityMediaName eq 'Groundwater'", 30},
		{query.Records, "RegionId eq 'hub.greatlakes' and ActivityGroupType eq 'Field Measure'", 200},
		{query.Locations, "", 7},
		{query.Locations, "CharacteristicName eq 'Titanium'", 3},
		{query.Locations, "RegionId eq 'hub.greatlakes'", 4},
		{query.Locations, "Latitude gt 50 and Longitude lt -100", 5},
		{query.Locations, "Name eq '" + strings.ReplaceAll(loc.Name, "'", "''") + "'", 5},
		{query.Locations, fmt.Sprintf("Id eq %d", loc.ID), 5},
		{query.Locations, "ActivityStartYear gt 2015 and MonitoringLocationType eq 'River/Stream'", 6},
		{query.Locations, "DOI eq '" + doi + "' and CharacteristicName in ('pH', 'Turbidity')", 4},
		{query.Metadata, "", 2},
		{query.Metadata, "CharacteristicName eq 'Titanium'", 2},
		{query.Metadata, "CreateTimestamp gt 2021-01-01", 2},
		{query.Metadata, "CreateTimestamp le '2021-01-01T00:00:00Z'", 2},
		{query.Metadata, "Id eq '" + strings.ToUpper(ds[2].ID) + "'", 2},
		{query.Metadata, "DatasetName eq '" + strings.ReplaceAll(ds[4].DatasetName, "'", "''") + "'", 2},
		{query.Metadata, "Latitude gt 55", 2},
		{query.Metadata, "RegionId eq 'hub.atlantic' and CharacteristicName eq 'pH'", 2},
		{query.Metadata, fmt.Sprintf("LocationId eq %d", loc.ID), 2},
	}
}

func TestBehaviour(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // each backend has its own store and server
			e := newEnv(t, b, smallData, testOptions(), nil)
			c := newClient(t)
			for _, fc := range e.filterCases() {
				name := fc.coll.Name + " " + fc.filter
				parsed, err := query.ParseFilter(fc.coll, fc.filter)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := e.data.expected(fc.coll, parsed)
				u := fmt.Sprintf("%s/%s?$top=%d", e.base, fc.coll.Name, fc.top)
				if fc.filter != "" {
					u += "&$filter=" + url.QueryEscape(fc.filter)
				}
				got := ids(e.pull(c, fc.coll, u, fc.top))
				if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("%s: got %d rows, want %d\n got %.200v\nwant %.200v", name, len(got), len(want), got, want)
				}
				// $count gives the same number, as a string, with no rows.
				r := e.get(c, u+"&$count=true&$select=Id", "Accept", "application/vnd.api+json")
				if r.status != 200 || string(r.body) != fmt.Sprintf(`{"value":"%d"}`, len(want)) {
					t.Errorf("%s: count answered %d %s, want %d", name, r.status, r.body, len(want))
				}
			}
		})
	}
}

// Every field of every row of every collection, in the documented order,
// with nulls, numbers, timestamps, dates, times and arrays as the oracle has
// them.
func TestRowsMatchData(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // each backend has its own store and server
			e := newEnv(t, b, smallData, testOptions(), nil)
			c := newClient(t)
			for _, coll := range []*query.Collection{query.Metadata, query.Locations, query.Observations, query.Records} {
				top := 1000
				rows := e.pull(c, coll, fmt.Sprintf("%s/%s?$top=%d", e.base, coll.Name, top), top)
				if want := e.data.expected(coll, nil); len(rows) != len(want) {
					t.Fatalf("%s: %d rows, want %d", coll.Name, len(rows), len(want))
				}
				var order []string
				for _, f := range coll.Fields {
					order = append(order, f.Name)
				}
				for _, r := range rows {
					if !reflect.DeepEqual(r.keys, order) {
						t.Fatalf("%s: field order\n got %v\nwant %v", coll.Name, r.keys, order)
					}
					id := fmt.Sprint(r.vals["Id"])
					want := e.data.rowOf(coll, id)
					for _, k := range order {
						if !reflect.DeepEqual(r.vals[k], want[k]) {
							t.Fatalf("%s %s: %s = %#v, want %#v", coll.Name, id, k, r.vals[k], want[k])
						}
					}
				}
			}
			// $select keeps the collection's order whatever the request's.
			r := e.get(c, e.base+"/Records?$top=3&$select=LaboratoryName,%20Id,DOI,ResultDetectionQuantitationLimitUnit,ResultDetectionQuantitationLimitMeasure")
			p := decodePage(t, r.body)
			want := []string{"Id", "DOI", "ResultDetectionQuantitationLimitMeasure", "ResultDetectionQuantitationLimitUnit", "LaboratoryName"}
			if len(p.rows) != 3 || !reflect.DeepEqual(p.rows[0].keys, want) {
				t.Fatalf("$select order: %v", p.rows)
			}
		})
	}
}

// The request forms clients send all mean the same query.
func TestQuerySpellings(t *testing.T) {
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	c := newClient(t)
	ref := e.get(c, e.base+"/Observations?$top=5&$filter=CharacteristicName%20eq%20'pH'")
	if ref.status != 200 {
		t.Fatalf("%d %s", ref.status, ref.body)
	}
	for _, q := range []string{
		"%24top=5&%24filter=CharacteristicName+eq+%27pH%27",
		"$top=5&$filter=CharacteristicName+eq+'pH'&$select=&$orderby=&$skiptoken=&$count=",
		"%24filter=CharacteristicName%20eq%20pH&%24top=5",
		"$top=5&$filter=CharacteristicName%20eq%20'pH'&$count=false",
	} {
		r := e.get(c, e.base+"/Observations?"+q)
		if r.status != 200 {
			t.Errorf("%s: %d %s", q, r.status, r.body)
			continue
		}
		if !reflect.DeepEqual(ids(decodePage(t, r.body).rows), ids(decodePage(t, ref.body).rows)) {
			t.Errorf("%s: different rows", q)
		}
	}
	// The next link carries every option, $skiptoken first, then $top, and
	// no raw space.
	p := decodePage(t, e.get(c, e.base+"/Records?%24select=Id,DOI&%24top=2&%24filter=CharacteristicName+eq+%27pH%27&%24count=false").body)
	want := fmt.Sprintf("%s/Records?$skiptoken=Id%%3A%s&$top=2&$select=Id,DOI&$filter=CharacteristicName%%20eq%%20'pH'&$count=false", e.base, ids(p.rows)[1])
	if p.next != want {
		t.Fatalf("next link\n got %s\nwant %s", p.next, want)
	}
}

func TestNextLinkBase(t *testing.T) {
	b := backends()[0]
	db, _ := openLoaded(t, b, smallData)
	key, _, err := db.AddKey(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.PublicURL = "https://api.example.org"
	opts.Root = "/odata"
	_, base := startServer(t, db, opts, nil)
	c := newClient(t)
	r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key)
	p := decodePage(t, r.body)
	if !strings.HasPrefix(p.next, "https://api.example.org/odata/Locations?$skiptoken=Id%3A1&$top=1") {
		t.Fatalf("next link %q", p.next)
	}
	// Without a public URL: the request's Host and scheme; forwarded ones
	// only from a trusted proxy.
	_, base2 := startServer(t, db, testOptions(), nil)
	host := strings.TrimSuffix(strings.TrimPrefix(base2, "http://"), "/v1/odata/v4")
	trustedOpts := testOptions()
	trustedOpts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	_, base3 := startServer(t, db, trustedOpts, nil)
	host3 := strings.TrimSuffix(strings.TrimPrefix(base3, "http://"), "/v1/odata/v4")
	otherOpts := testOptions()
	otherOpts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	_, base4 := startServer(t, db, otherOpts, nil)
	host4 := strings.TrimSuffix(strings.TrimPrefix(base4, "http://"), "/v1/odata/v4")
	fwdOpts := trustedOpts
	fwdOpts.ForwardedHeader = "Forwarded"
	_, base5 := startServer(t, db, fwdOpts, nil)
	for _, tc := range []struct {
		base    string
		headers []string
		want    string
	}{
		{base2, nil, "http://" + host},
		// A Host that is not this server's address writes no link.
		{base2, []string{"Host", "evil.example"}, "http://" + host},
		{base2, []string{"Host", "evil.example:" + strings.Split(host, ":")[1]}, "http://" + host},
		{base2, []string{"Host", "localhost:" + strings.Split(host, ":")[1]}, "http://localhost:" + strings.Split(host, ":")[1]},
		{base2, []string{"X-Forwarded-Proto", "https"}, "http://" + host},
		{base2, []string{"X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example"}, "http://" + host},
		{base2, []string{"Forwarded", "proto=https;host=evil.example"}, "http://" + host},
		{base3, []string{"X-Forwarded-Proto", "https"}, "https://" + host3},
		{base3, []string{"X-Forwarded-Proto", "HTTPS, http", "X-Forwarded-Host", "data.example.org"}, "https://data.example.org"},
		{base3, []string{"Forwarded", `for=192.0.2.60;proto=https;host="data.example.org:8443", for=10.1.1.1`}, "http://" + host3},
		{base5, []string{"Forwarded", `for=192.0.2.60;proto=https;host="data.example.org:8443", for=10.1.1.1`}, "https://data.example.org:8443"},
		{base5, []string{"X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example"}, "http://" + strings.TrimSuffix(strings.TrimPrefix(base5, "http://"), "/v1/odata/v4")},
		{base3, []string{"X-Forwarded-Proto", "javascript", "X-Forwarded-Host", "a b/c"}, "http://" + host3},
		{base4, []string{"X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example"}, "http://" + host4},
	} {
		r := do(t, c, "GET", tc.base+"/Locations?$top=1", append([]string{"x-api-key", key}, tc.headers...)...)
		p := decodePage(t, r.body)
		if want := tc.want + "/v1/odata/v4/Locations?"; !strings.HasPrefix(p.next, want) {
			t.Errorf("%v: next link %q, want it to start with %q", tc.headers, p.next, want)
		}
		if link := r.header.Get("Link"); !strings.HasPrefix(link, "<"+tc.want+"/") {
			t.Errorf("%v: Link %q", tc.headers, link)
		}
	}
}
