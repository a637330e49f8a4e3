package odata_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/query"
)

// The official clients, as their published sources behave (datastream-py
// api.py, datastreamjs index.js on @datastream/fetch, datastreamr fetch.R,
// datastreamsh datastream.sh): how each encodes options, which link it
// follows, and how it partitions a pull by location.

type kv struct{ k, v string }

// pythonQuery is requests' encoding of a params dict: quote_plus.
func pythonQuery(params []kv) string {
	var parts []string
	for _, p := range params {
		parts = append(parts, url.QueryEscape(p.k)+"="+url.QueryEscape(p.v))
	}
	return strings.Join(parts, "&")
}

// jsQuery is URLSearchParams with '+' turned into %20, as @datastream/fetch does.
func jsQuery(params []kv) string {
	return strings.ReplaceAll(pythonQuery(params), "+", "%20")
}

// curlEscape is R's curl::curl_escape and the shell client's urlencode:
// only RFC 3986 unreserved characters stay raw.
func curlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func rQuery(params []kv) string {
	var parts []string
	for _, p := range params {
		parts = append(parts, curlEscape(p.k)+"="+curlEscape(p.v))
	}
	return strings.Join(parts, "&")
}

var partitionedRE = regexp.MustCompile(`(^Id| Id|^LocationId| LocationId)`)

type client struct {
	name string
	e    *env
	http *http.Client
	// first builds the first URL of a pull.
	first func(path string, params []kv) string
	// follow returns the next URL from a response, or "".
	follow  func(t *testing.T, current string, r response, params []kv) string
	headers []string
	// key is the client's API key; "" uses the env's.
	key string
	// decodes are the content codings the client can read (nil: any): a
	// response in another one is the client's failure.
	decodes []string
	// retries: waits Retry-After and retries a 429 (Python); the others
	// throw on any status but 200.
	retries bool
	// shell: a body without "value" ends the pull as an empty last page,
	// and one with "errors" fails it (jq in datastream.sh).
	shell bool
	// locationFilter is how the client writes the partition filter.
	locationFilter func(id any, filter string) string
	// locationsFilter is how it rewrites the filter for /Locations.
	locationsFilter func(filter string) string
}

func (c *client) fetch(t *testing.T, path string, params []kv) []row {
	t.Helper()
	var out []row
	u := c.first(path, params)
	for pages := 0; u != ""; pages++ {
		if pages > 1000 {
			t.Fatalf("%s: more than 1000 pages", c.name)
		}
		r := c.get(t, u)
		if c.shell {
			var members map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &members); err != nil {
				t.Fatalf("%s: GET %s: jq cannot parse the body (%v): %.200q", c.name, u, err, r.body)
			}
			if _, failed := members["errors"]; failed {
				t.Fatalf("%s: GET %s: the client stops on %d %s", c.name, u, r.status, r.body)
			}
			if _, ok := members["value"]; !ok {
				t.Fatalf("%s: GET %s: %d %s has no value: the client would take it for an empty last page and lose the rest", c.name, u, r.status, r.body)
			}
		}
		if r.status != 200 {
			t.Fatalf("%s: GET %s: %d %s", c.name, u, r.status, r.body)
		}
		p := decodePage(t, r.body)
		out = append(out, p.rows...)
		next := c.follow(t, u, r, params)
		if next == u {
			t.Fatalf("%s: next URL repeats the current page", c.name)
		}
		u = next
	}
	return out
}

// get is one request as the client makes it: its headers, the codings it
// can decode, and its answer to a 429.
func (c *client) get(t *testing.T, u string) response {
	t.Helper()
	key := c.key
	if key == "" {
		key = c.e.key
	}
	for attempt := 0; ; attempt++ {
		r := do(t, c.http, "GET", u, append([]string{"x-api-key", key}, c.headers...)...)
		if coding := r.header.Get("Content-Encoding"); coding != "" && c.decodes != nil && !slices.Contains(c.decodes, coding) {
			t.Fatalf("%s: GET %s: Content-Encoding %q, which the client cannot decode (it sent %v)", c.name, u, coding, c.headers)
		}
		if r.status == 429 && c.retries && attempt < 20 {
			secs, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || secs < 1 || secs > 60 {
				t.Fatalf("%s: 429 with Retry-After %q", c.name, r.header.Get("Retry-After"))
			}
			time.Sleep(time.Duration(secs) * time.Second)
			continue
		}
		return r
	}
}

// pull is the client's observations()/records(): partitioned by location
// unless the filter names Id or LocationId.
func (c *client) pull(t *testing.T, coll string, params []kv) []row {
	t.Helper()
	filter := ""
	for _, p := range params {
		if p.k == "$filter" {
			filter = p.v
		}
	}
	path := "/" + coll
	if partitionedRE.MatchString(filter) {
		return c.fetch(t, path, params)
	}
	locs := c.fetch(t, "/Locations", []kv{{"$top", "10000"}, {"$select", "Id"}, {"$filter", c.locationsFilter(filter)}})
	var out []row
	for _, l := range locs {
		if len(l.keys) != 1 || l.keys[0] != "Id" {
			t.Fatalf("%s: $select=Id gave %v", c.name, l.keys)
		}
		f := c.locationFilter(l.vals["Id"], filter)
		var ps []kv
		for _, p := range params {
			if p.k != "$filter" {
				ps = append(ps, p)
			}
		}
		out = append(out, c.fetch(t, path, append(ps, kv{"$filter", f}))...)
	}
	return out
}

func clients(e *env) []*client {
	hc := newClient(e.t)
	followBody := func(t *testing.T, _ string, r response, _ []kv) string {
		return decodePage(t, r.body).next
	}
	plainFilter := func(f string) string { return f }
	return []*client{
		{
			name: "python", e: e, http: hc,
			first:  func(path string, ps []kv) string { return e.base + path + "?" + pythonQuery(ps) },
			follow: followBody, // verbatim
			// requests decodes gzip and deflate; br only with the brotli
			// module, which is not among the client's dependencies.
			headers: []string{"Accept", "application/vnd.api+json", "Accept-Encoding", "gzip, deflate, br"},
			decodes: []string{"gzip", "deflate"},
			retries: true,
			locationFilter: func(id any, f string) string {
				if f == "" {
					return fmt.Sprintf("LocationId eq %v", id)
				}
				return fmt.Sprintf("LocationId eq %v and %s", id, f)
			},
			locationsFilter: plainFilter,
		},
		{
			name: "javascript", e: e, http: hc,
			first: func(path string, ps []kv) string { return e.base + path + "?" + jsQuery(ps) },
			// Only the Link header, resolved against the page and kept on
			// the same origin.
			follow: func(t *testing.T, current string, r response, _ []kv) string {
				link := r.header.Get("Link")
				if link == "" {
					return ""
				}
				m := regexp.MustCompile(`<([^>]*)>\s*;\s*rel\s*=\s*"?next`).FindStringSubmatch(link)
				if m == nil {
					t.Fatalf("javascript: unparsable Link %q", link)
				}
				cur, _ := url.Parse(current)
				next, err := cur.Parse(m[1])
				if err != nil || next.Host != cur.Host || next.Scheme != cur.Scheme {
					t.Fatalf("javascript: next link %q is not on the origin of %q", m[1], current)
				}
				return next.String()
			},
			headers: []string{"Accept", "application/vnd.api+json", "Accept-Encoding", "br"},
			decodes: []string{"gzip", "deflate", "br"}, // fetch in Node
			locationFilter: func(id any, f string) string {
				return fmt.Sprintf("LocationId eq %v and %s", id, f)
			},
			locationsFilter: plainFilter,
		},
		{
			name: "r", e: e, http: hc,
			first: func(path string, ps []kv) string { return e.base + path + "?" + rQuery(ps) },
			// httr::GET(next_link, query = qs): the link's options with the
			// client's own options laid over them, re-encoded.
			follow: func(t *testing.T, _ string, r response, ps []kv) string {
				next := decodePage(t, r.body).next
				if next == "" {
					return ""
				}
				u, err := url.Parse(next)
				if err != nil {
					t.Fatal(err)
				}
				link, err := query.Decode([]byte(u.RawQuery))
				if err != nil {
					t.Fatal(err)
				}
				var merged []kv
				for _, p := range link {
					merged = append(merged, kv{p.Name, p.Value})
				}
				for _, own := range ps {
					found := false
					for i := range merged {
						if merged[i].k == own.k {
							merged[i].v, found = own.v, true
						}
					}
					if !found {
						merged = append(merged, own)
					}
				}
				u.RawQuery = rQuery(merged)
				return u.String()
			},
			headers: []string{"Accept", "application/vnd.api+json", "Accept-Encoding", "deflate, gzip"},
			decodes: []string{"gzip", "deflate"}, // libcurl
			locationFilter: func(id any, f string) string {
				return fmt.Sprintf("LocationId eq '%v' and %s", id, f)
			},
			locationsFilter: func(f string) string { return strings.ReplaceAll(f, "LocationId", "Id") },
		},
		{
			name: "shell", e: e, http: hc,
			first: func(path string, ps []kv) string {
				// urlconcat: %24top first, then %24select, then %24filter.
				var top, sel, filter string
				for _, p := range ps {
					switch p.k {
					case "$top":
						top = p.v
					case "$select":
						sel = p.v
					case "$filter":
						filter = p.v
					}
				}
				u := e.base + path + "?%24top=" + curlEscape(top)
				if sel != "" {
					u += "&%24select=" + curlEscape(sel)
				}
				if filter != "" {
					u += "&%24filter=" + curlEscape(filter)
				}
				return u
			},
			// jq -r '."@odata.nextLink"', passed unquoted to curl -sG: it
			// must hold no space.
			follow: func(t *testing.T, _ string, r response, _ []kv) string {
				next := decodePage(t, r.body).next
				if strings.ContainsAny(next, " \t\n") {
					t.Fatalf("shell: next link %q would split in the shell", next)
				}
				return next
			},
			// curl -H 'Accept-Encoding: br' without --compressed: the
			// bytes reach jq as they come.
			headers: []string{"Accept", "application/vnd.api+json", "Accept-Encoding", "br"},
			decodes: []string{},
			shell:   true,
			locationFilter: func(id any, f string) string {
				return fmt.Sprintf("LocationId eq %v and %s", id, f)
			},
			locationsFilter: func(f string) string { return strings.Replace(f, "LocationId", "Id", 1) },
		},
	}
}

func sortIDs(out []string) []string {
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i])
		b, _ := strconv.Atoi(out[j])
		return a < b
	})
	return out
}

// expectedPull is what a client's pull must return: the oracle's rows for
// the literal filter of every partition the client sends. Partition
// filters are not parenthesised, so with a top-level `or` in the user's
// filter a row can come once per location; that is the clients' own
// behaviour under standard precedence, and the server must answer each
// partition's filter exactly.
func (c *client) expectedPull(t *testing.T, coll *query.Collection, filter string) []string {
	t.Helper()
	parse := func(cl *query.Collection, f string) query.Expr {
		e, err := query.ParseFilter(cl, f)
		if err != nil {
			t.Fatalf("%s: %q: %v", c.name, f, err)
		}
		return e
	}
	if partitionedRE.MatchString(filter) {
		return c.e.data.expected(coll, parse(coll, filter))
	}
	var out []string
	for _, id := range c.e.data.expected(query.Locations, parse(query.Locations, c.locationsFilter(filter))) {
		out = append(out, c.e.data.expected(coll, parse(coll, c.locationFilter(id, filter)))...)
	}
	return sortIDs(out)
}

// clientData is small in locations: every client pull is one request per
// location and page, four clients on two stores.
var clientData = gen.Config{Rows: 1500, Datasets: 4, Locations: 12, Seed: 11}

func TestClientFlows(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // each backend has its own store and server
			e := newEnv(t, b, clientData, testOptions(), nil)
			doi := e.data.datasets[2].DOI
			for _, c := range clients(e) {
				for _, tc := range []struct {
					coll   *query.Collection
					params []kv
				}{
					{query.Observations, []kv{{"$top", "7"}, {"$filter", "CharacteristicName eq 'pH'"}}},
					{query.Records, []kv{{"$top", "6"}, {"$select", "Id,DOI,MonitoringLocationID,CharacteristicName,ResultValue"}, {"$filter", "RegionId eq 'hub.atlantic' and ActivityStartYear gt '2005'"}}},
					{query.Observations, []kv{{"$top", "9"}, {"$filter", "CharacteristicName in ('Titanium','Turbidity') or endswith(DOI, '" + doi[len(doi)-4:] + "')"}}},
					{query.Observations, []kv{{"$top", "100"}, {"$filter", fmt.Sprintf("LocationId eq %d", e.data.locations[3].ID)}}},
				} {
					filter := tc.params[len(tc.params)-1].v
					want := c.expectedPull(t, tc.coll, filter)
					got := sortIDs(ids(c.pull(t, tc.coll.Name, tc.params)))
					if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
						t.Errorf("%s %s %q: %d rows, want %d", c.name, tc.coll.Name, filter, len(got), len(want))
					}
				}
				// Counts: a decimal string in value (the Python client
				// returns it, the R client reads it with as.integer); the
				// shell client sends no $count.
				// Metadata and locations, paged with small pages.
				for _, coll := range []*query.Collection{query.Metadata, query.Locations} {
					got := ids(c.fetch(t, "/"+coll.Name, []kv{{"$top", "4"}}))
					if want := e.data.expected(coll, nil); !reflect.DeepEqual(got, want) {
						t.Errorf("%s %s: %d rows, want %d", c.name, coll.Name, len(got), len(want))
					}
				}
				if c.name == "shell" {
					continue
				}
				r := do(t, c.http, "GET", c.first("/Observations", []kv{{"$top", "10000"}, {"$count", "true"}, {"$filter", "CharacteristicName eq 'pH'"}}), append([]string{"x-api-key", e.key}, c.headers...)...)
				f, _ := query.ParseFilter(query.Observations, "CharacteristicName eq 'pH'")
				if want := fmt.Sprintf(`{"value":"%d"}`, len(e.data.expected(query.Observations, f))); string(r.body) != want {
					t.Errorf("%s count: %s, want %s", c.name, r.body, want)
				}
			}
			// The shell client stops on an errors member.
			r := e.get(newClient(t), e.base+"/Observations?%24top=10&%24filter="+curlEscape("Bogus eq 1"))
			if r.status != 400 || !strings.Contains(string(r.body), `"errors":[`) {
				t.Fatalf("shell error shape: %d %s", r.status, r.body)
			}
		})
	}
}
