package odata_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
)

// errorDetail returns the detail of an `errors` body, failing when the body
// does not have that shape.
func errorDetail(t *testing.T, status int, body []byte) string {
	t.Helper()
	var v struct {
		Errors []struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
			Detail string `json:"detail"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Errors) != 1 || v.Errors[0].Status != status || v.Errors[0].Title == "" {
		t.Fatalf("want an errors body with status %d, got %s", status, body)
	}
	return v.Errors[0].Detail
}

func TestErrorTable(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b, smallData, testOptions(), nil)
			c := newClient(t)
			revoked, _, err := e.db.AddKey(context.Background(), "old")
			if err != nil {
				t.Fatal(err)
			}
			if n, err := e.db.RevokeKey(context.Background(), "old"); err != nil || n != 1 {
				t.Fatalf("revoke: %d %v", n, err)
			}
			for _, tc := range []struct {
				name    string
				method  string
				target  string // after the root
				headers []string
				status  int
				body    string // exact body, or
				detail  string // a substring of the errors detail
			}{
				{name: "bad percent-encoding", target: "/Observations?$top=%zz", status: 400, body: `{"message":null}`},
				{name: "invalid UTF-8", target: "/Observations?$filter=DOI%20eq%20%27%ff%27", status: 400, body: `{"message":null}`},
				{name: "unknown field in filter", target: "/Observations?$filter=Foo%20eq%201", status: 400, detail: `"Foo"`},
				{name: "field not filterable here", target: "/Observations?$filter=DatasetName%20eq%20'x'", status: 400, detail: "DatasetName is not filterable on /Observations"},
				{name: "bad filter syntax", target: "/Observations?$filter=DOI%20eq", status: 400, detail: "expected a value for DOI"},
				{name: "bad literal", target: "/Observations?$filter=ActivityStartYear%20gt%20'soon'", status: 400, detail: "ActivityStartYear needs an integer"},
				{name: "unknown select", target: "/Records?$select=Id,Nope", status: 400, detail: `"Nope"`},
				{name: "top zero", target: "/Observations?$top=0", status: 400, detail: "$top"},
				{name: "top too big", target: "/Observations?$top=10001", status: 400, detail: "$top"},
				{name: "top not a number", target: "/Observations?$top=many", status: 400, detail: "$top"},
				{name: "bad skiptoken", target: "/Observations?$skiptoken=5", status: 400, detail: "$skiptoken"},
				{name: "integer skiptoken on Metadata", target: "/Metadata?$skiptoken=Id:5", status: 400, detail: "uuid"},
				{name: "orderby", target: "/Observations?$orderby=Id", status: 400, detail: "$orderby"},
				{name: "skip", target: "/Observations?$skip=5", status: 400, detail: "$skip"},
				{name: "count not boolean", target: "/Observations?$count=yes", status: 400, detail: "$count"},
				{name: "no key", target: "/Observations", headers: []string{"x-api-key", ""}, status: 401, body: `{"message":"Unauthorized"}`},
				{name: "unknown key", target: "/Observations", headers: []string{"x-api-key", "nope"}, status: 403, body: `{"message":"Forbidden"}`},
				{name: "revoked key", target: "/Observations", headers: []string{"x-api-key", revoked}, status: 403, body: `{"message":"Forbidden"}`},
				{name: "POST", method: "POST", target: "/Observations", status: 405, detail: "POST"},
				{name: "DELETE", method: "DELETE", target: "/Locations", status: 405, detail: "DELETE"},
				{name: "unknown collection", target: "/Samples", status: 404, detail: "Metadata"},
				{name: "Accept vnd.api+json is fine", target: "/Locations?$top=1", headers: []string{"Accept", "application/vnd.api+json"}, status: 200},
				{name: "service root", target: "", status: 200},
			} {
				method := tc.method
				if method == "" {
					method = "GET"
				}
				headers := append([]string{"x-api-key", e.key}, tc.headers...)
				r := do(t, c, method, e.base+tc.target, headers...)
				if r.status != tc.status {
					t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
					continue
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
					t.Errorf("%s: Content-Type %q", tc.name, ct)
				}
				if tc.status == 405 && r.header.Get("Allow") != "GET, HEAD, OPTIONS" {
					t.Errorf("%s: Allow %q", tc.name, r.header.Get("Allow"))
				}
				switch {
				case tc.body != "":
					if string(r.body) != tc.body {
						t.Errorf("%s: body %s, want %s", tc.name, r.body, tc.body)
					}
				case tc.detail != "":
					if d := errorDetail(t, tc.status, r.body); !strings.Contains(d, tc.detail) {
						t.Errorf("%s: detail %q does not mention %q", tc.name, d, tc.detail)
					}
				}
			}
		})
	}
}

// 413 is decided before streaming: from the stored size bounds, then from
// the page's own rows, so a page that fits is served even when the bound
// alone would not.
func TestPageSizeCap(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { pageSizeCap(t, b) })
	}
}

func pageSizeCap(t *testing.T, b backend) {
	db, _ := openLoaded(t, b, smallData)
	key, _, _ := db.AddKey(context.Background(), "k")
	c := newClient(t)
	opts := testOptions()
	opts.MaxPageBytes = 20_000
	_, base := startServer(t, db, opts, nil)

	r := do(t, c, "GET", base+"/Records?$top=100", "x-api-key", key)
	if r.status != 413 {
		t.Fatalf("100 records under a 20 kB cap: %d %s", r.status, r.body)
	}
	if d := errorDetail(t, 413, r.body); !strings.Contains(d, "$top") {
		t.Fatalf("detail %q", d)
	}
	r = do(t, c, "GET", base+"/Records?$top=100&$select=Id", "x-api-key", key)
	if r.status != 200 {
		t.Fatalf("100 ids: %d %s", r.status, r.body)
	}
	r = do(t, c, "GET", base+"/Records?$top=5", "x-api-key", key)
	if r.status != 200 || len(r.body) > 20_000 {
		t.Fatalf("5 records: %d, %d bytes", r.status, len(r.body))
	}
	// A page just under the cap by its real size but over it by the
	// longest-value bound is served: find the largest $top that is served
	// and check its body is within the cap.
	best := 0
	for top := 5; top <= 100; top += 5 {
		r := do(t, c, "GET", fmt.Sprintf("%s/Records?$top=%d", base, top), "x-api-key", key)
		if r.status == 200 {
			if len(r.body) > 20_000 {
				t.Fatalf("$top=%d served %d bytes over a 20000 cap", top, len(r.body))
			}
			best = top
		}
	}
	if best == 0 {
		t.Fatal("no page size was served")
	}
}

// 504: a query past its budget. With a budget that is already over, the
// probe fails at once on both stores.
func TestQueryBudget(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db, _ := openLoaded(t, b, smallData)
			key, _, _ := db.AddKey(context.Background(), "k")
			opts := testOptions()
			opts.QueryTimeout = time.Nanosecond
			_, base := startServer(t, db, opts, nil)
			c := newClient(t)
			for _, target := range []string{"/Observations?$top=10", "/Observations?$count=true"} {
				r := do(t, c, "GET", base+target, "x-api-key", key)
				if r.status != 504 {
					t.Fatalf("%s: %d %s", target, r.status, r.body)
				}
				if d := errorDetail(t, 504, r.body); !strings.Contains(d, "did not finish") {
					t.Fatalf("detail %q", d)
				}
			}
		})
	}
}

// 504 from a query that really runs too long: PostgreSQL blocked by a lock
// another session holds. The status, not the time, is asserted.
func TestQueryBudgetBlockedPostgres(t *testing.T) {
	b := backends()[1]
	dsn := b.loaded(t, smallData)
	b.loaded = func(*testing.T, gen.Config) string { return dsn }
	db, _ := openLoaded(t, b, smallData)
	key, _, _ := db.AddKey(context.Background(), "k")
	opts := testOptions()
	opts.QueryTimeout = 300 * time.Millisecond
	_, base := startServer(t, db, opts, nil)

	ctx := context.Background()
	locker, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE observations IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	r := do(t, c, "GET", base+"/Observations?$top=10", "x-api-key", key)
	if r.status != 504 {
		t.Fatalf("blocked probe: %d %s", r.status, r.body)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r = do(t, c, "GET", base+"/Observations?$top=10", "x-api-key", key)
	if r.status != 200 {
		t.Fatalf("after the lock: %d %s", r.status, r.body)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*odata.Options)
		ok   bool
	}{
		{"defaults", func(*odata.Options) {}, true},
		{"root without slash", func(o *odata.Options) { o.Root = "v1" }, false},
		{"root with trailing slash", func(o *odata.Options) { o.Root = "/v1/" }, false},
		{"tiny cap", func(o *odata.Options) { o.MaxPageBytes = 10 }, false},
		{"no budget", func(o *odata.Options) { o.QueryTimeout = 0 }, false},
		{"public URL with path", func(o *odata.Options) { o.PublicURL = "https://x.org/api" }, false},
		{"public URL", func(o *odata.Options) { o.PublicURL = "https://x.org" }, true},
		{"wildcard origin", func(o *odata.Options) { o.CORSOrigins = []string{"*"} }, false},
		{"origin", func(o *odata.Options) { o.CORSOrigins = []string{"https://app.example.org"} }, true},
		{"no stream timeout", func(o *odata.Options) { o.StreamTimeout = 0 }, false},
		{"negative filter budget", func(o *odata.Options) { o.FilterBudget = -1 }, false},
		{"no filter budget", func(o *odata.Options) { o.FilterBudget = 0 }, true},
		{"negative key cache", func(o *odata.Options) { o.KeyCacheTTL = -time.Second }, false},
		{"key failures without a window", func(o *odata.Options) { o.KeyFailureWindow = 0 }, false},
		{"no key throttle", func(o *odata.Options) { o.KeyFailures, o.KeyFailureWindow = 0, 0 }, true},
		{"negative origin cap", func(o *odata.Options) { o.OriginMaxInFlight = -1 }, false},
		{"no query cap", func(o *odata.Options) { o.MaxQueries = -1 }, true},
	} {
		o := odata.DefaultOptions()
		tc.mod(&o)
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
}
