package odata_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/odatatest"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/odata/values"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.WithSharedStop(withFixtures{m}),
		// fasthttp refreshes its Date header from one process-wide
		// goroutine it never stops.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// A stopped server's worker-pool cleaner ends by itself after its
		// idle sleep (MaxIdleWorkerDuration, one second); the server's own
		// goroutines (serve loop, workers, body writers) are still checked.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// smallData is the generated data set most tests read: enough rows for
// several pages, every region kind, rare and common characteristics.
var smallData = gen.Config{Rows: 3000, Datasets: 6, Locations: 40, Seed: 7}

type backend struct {
	name string
	// dsn returns an empty store of the test's own.
	dsn func(t *testing.T) string
	// loaded, when set, returns a store of the test's own holding cfg's
	// data: a copy of a template loaded once (fixtures_test.go).
	loaded func(t *testing.T, cfg gen.Config) string
}

// backends are the stores every behaviour test runs against: SQLite always,
// PostgreSQL through the shared test server.
func backends() []backend {
	return []backend{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "odata.sqlite") },
			func(t *testing.T, cfg gen.Config) string { return cloneSQLite(t, template(t, "sqlite", cfg).src) }},
		{"postgres", func(t *testing.T) string { return testenv.SharedPostgres(t).CreateDatabase(t, t.Name()) },
			func(t *testing.T, cfg gen.Config) string {
				return testenv.SharedPostgres(t).CloneDatabase(t, t.Name(), template(t, "postgres", cfg).src)
			}},
	}
}

// env is a loaded store, an API key and a running server.
type env struct {
	t    *testing.T
	db   *sqlstore.DB
	srv  *odata.Server
	base string // http://127.0.0.1:port/v1/odata/v4
	key  string
	data *oracle
}

// openLoaded opens a store of the test's own holding cfg's data, and the
// oracle of that data: a copy of a loaded template when b has them,
// otherwise loaded here.
func openLoaded(t *testing.T, b backend, cfg gen.Config) (*sqlstore.DB, *oracle) {
	t.Helper()
	ctx := context.Background()
	if b.loaded != nil {
		db, err := odata.OpenStore(ctx, b.loaded(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, cachedOracle(t, cfg)
	}
	db, err := odata.OpenStore(ctx, b.dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Load(ctx, db, g, nil); err != nil {
		t.Fatal(err)
	}
	return db, cachedOracle(t, cfg)
}

func newEnv(t *testing.T, b backend, cfg gen.Config, opts odata.Options, lim odata.RateLimiter) *env {
	t.Helper()
	db, data := openLoaded(t, b, cfg)
	e := &env{t: t, db: db, data: data}
	var err error
	if e.key, _, err = db.AddKey(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	e.srv, e.base = startServer(t, db, opts, lim)
	return e
}

func testOptions() odata.Options {
	o := odata.DefaultOptions()
	o.Sequential = false // most tests are not about it; it has its own
	o.StallTimeout = 20 * time.Second
	return o
}

func startServer(t *testing.T, db *sqlstore.DB, opts odata.Options, lim odata.RateLimiter) (*odata.Server, string) {
	t.Helper()
	return odatatest.Serve(t, opts, db, db, lim)
}

// client is a plain HTTP client with no keep-alive surprises between tests.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) get(c *http.Client, url string, headers ...string) response {
	e.t.Helper()
	return do(e.t, c, "GET", url, append([]string{"x-api-key", e.key}, headers...)...)
}

func do(t *testing.T, c *http.Client, method, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			req.Host = headers[i+1] // net/http ignores a Host in Header
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	r := decodeBody(t, resp.Header.Get("Content-Encoding"), resp.Body)
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

// row is a decoded response row with its keys in wire order.
type row struct {
	keys []string
	vals map[string]any
}

type page struct {
	rows []row
	next string
	has  bool // the body has @odata.nextLink
}

// decodePage parses a page body strictly: an object with "value" (an array
// of objects) and optionally "@odata.nextLink", nothing else.
func decodePage(t *testing.T, body []byte) page {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var p page
	expect := func(want json.Delim) {
		tok, err := dec.Token()
		if err != nil || tok != want {
			t.Fatalf("page: want %v, got %v (%v) in %.300s", want, tok, err, body)
		}
	}
	expect('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		switch tok {
		case "value":
			expect('[')
			for dec.More() {
				expect('{')
				r := row{vals: map[string]any{}}
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						t.Fatal(err)
					}
					var v any
					if err := dec.Decode(&v); err != nil {
						t.Fatal(err)
					}
					r.keys = append(r.keys, k.(string))
					r.vals[k.(string)] = v
				}
				expect('}')
				p.rows = append(p.rows, r)
			}
			expect(']')
		case "@odata.nextLink":
			if err := dec.Decode(&p.next); err != nil {
				t.Fatal(err)
			}
			p.has = true
		default:
			t.Fatalf("page: unexpected member %v", tok)
		}
	}
	expect('}')
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("page: trailing data after the object")
	}
	return p
}

// --- the oracle ----------------------------------------------------------------

// oracle is the generated data set, regenerated in memory from the seed:
// what the store must return, computed without SQL.
type oracle struct {
	datasets  []*sqlstore.Dataset
	locations []*sqlstore.Location
	obs       []sqlstore.Observation // obs[i] has Id i+1
	schema    *values.Schema
	byDOI     map[string]*sqlstore.Dataset
	locByID   map[int64]*sqlstore.Location
}

func newOracle(t *testing.T, cfg gen.Config) *oracle {
	t.Helper()
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.NumberLocations(1)
	schema, err := values.Load()
	if err != nil {
		t.Fatal(err)
	}
	o := &oracle{datasets: g.Datasets(), locations: g.Locations(), schema: schema,
		byDOI: map[string]*sqlstore.Dataset{}, locByID: map[int64]*sqlstore.Location{}}
	for _, d := range o.datasets {
		o.byDOI[d.DOI] = d
	}
	for _, l := range o.locations {
		o.locByID[l.ID] = l
	}
	var ob sqlstore.Observation
	for g.Next(&ob) {
		o.obs = append(o.obs, ob)
	}
	return o
}

// value of a filter field for an (observation, location, dataset) triple;
// for RegionId the location's regions.
type fieldValue struct {
	s       string
	n       float64
	regions []string
	num     bool
}

func (o *oracle) field(c *query.Collection, name string, ob *sqlstore.Observation, loc *sqlstore.Location, ds *sqlstore.Dataset) fieldValue {
	switch name {
	case "DOI":
		return fieldValue{s: ds.DOI}
	case "DatasetName":
		return fieldValue{s: ds.DatasetName}
	case "CreateTimestamp":
		return fieldValue{s: ds.CreateTimestamp}
	case "Id":
		if c == query.Metadata {
			return fieldValue{s: ds.ID}
		}
		return fieldValue{n: float64(loc.ID), num: true}
	case "LocationId":
		return fieldValue{n: float64(loc.ID), num: true}
	case "Name":
		return fieldValue{s: loc.Name}
	case "Latitude":
		return fieldValue{n: loc.Latitude, num: true}
	case "Longitude":
		return fieldValue{n: loc.Longitude, num: true}
	case "MonitoringLocationType":
		return fieldValue{s: loc.Type}
	case "RegionId":
		return fieldValue{regions: loc.Regions}
	case "CharacteristicName":
		return fieldValue{s: ob.Tail[query.CharacteristicName].S}
	case "ActivityMediaName":
		return fieldValue{s: ob.Tail[query.ActivityMediaName].S}
	case "ActivityGroupType":
		g, _ := o.schema.GroupType(ob.Tail[query.ActivityType].S)
		return fieldValue{s: g}
	case "ActivityStartYear":
		y, _ := strconv.Atoi(ob.Tail[query.ActivityStartDate].S[:4])
		return fieldValue{n: float64(y), num: true}
	}
	panic("oracle: unknown field " + name)
}

func litNum(l query.Literal) float64 {
	if l.Type == query.LitInt {
		return float64(l.Int)
	}
	return l.Float
}

func cmp(v fieldValue, op query.Op, l query.Literal) bool {
	if v.regions != nil || l.Type == query.LitRegion {
		has := false
		for _, r := range v.regions {
			has = has || r == l.Text
		}
		if op == query.OpNe {
			return !has
		}
		return has
	}
	var c int
	if v.num {
		c = 0
		if a, b := v.n, litNum(l); a < b {
			c = -1
		} else if a > b {
			c = 1
		}
	} else {
		c = strings.Compare(v.s, l.Text)
	}
	switch op {
	case query.OpEq:
		return c == 0
	case query.OpNe:
		return c != 0
	case query.OpLt:
		return c < 0
	case query.OpGt:
		return c > 0
	case query.OpLe:
		return c <= 0
	}
	return c >= 0
}

func (o *oracle) eval(c *query.Collection, e query.Expr, ob *sqlstore.Observation, loc *sqlstore.Location, ds *sqlstore.Dataset) bool {
	switch e := e.(type) {
	case nil:
		return true
	case *query.And:
		for _, a := range e.Args {
			if !o.eval(c, a, ob, loc, ds) {
				return false
			}
		}
		return true
	case *query.Or:
		for _, a := range e.Args {
			if o.eval(c, a, ob, loc, ds) {
				return true
			}
		}
		return false
	case *query.Compare:
		return cmp(o.field(c, e.Field, ob, loc, ds), e.Op, e.Value)
	case *query.In:
		v := o.field(c, e.Field, ob, loc, ds)
		for _, l := range e.Values {
			if cmp(v, query.OpEq, l) {
				return true
			}
		}
		return false
	case *query.Match:
		v := o.field(c, e.Field, ob, loc, ds).s
		switch e.Func {
		case query.FuncEndsWith:
			return strings.HasSuffix(v, e.Value.Text)
		case query.FuncStartsWith:
			return strings.HasPrefix(v, e.Value.Text)
		}
		return strings.Contains(v, e.Value.Text)
	}
	panic(fmt.Sprintf("oracle: node %T", e))
}

var obsFields = map[string]bool{"CharacteristicName": true, "ActivityMediaName": true, "ActivityGroupType": true, "ActivityStartYear": true}
var locFields = map[string]bool{"LocationId": true, "Name": true, "Latitude": true, "Longitude": true, "MonitoringLocationType": true, "RegionId": true}

// expected returns the Ids (as strings) of the rows of collection c that
// match filter f, in Id order.
func (o *oracle) expected(c *query.Collection, f query.Expr) []string {
	var out []string
	needObs, needLoc := false, false
	query.Fields(f, func(n string) {
		needObs = needObs || obsFields[n]
		needLoc = needLoc || locFields[n] || (c == query.Locations && n == "Id")
	})
	switch c {
	case query.Observations, query.Records:
		for i := range o.obs {
			ob := &o.obs[i]
			loc := o.locByID[ob.LocationID]
			if o.eval(c, f, ob, loc, o.byDOI[ob.DOI]) {
				out = append(out, strconv.Itoa(i+1))
			}
		}
	case query.Locations:
		for _, loc := range o.locations {
			ds := o.byDOI[loc.DOI]
			ok := false
			if !needObs {
				ok = o.eval(c, f, nil, loc, ds)
			} else {
				for i := range o.obs {
					if o.obs[i].LocationID == loc.ID && o.eval(c, f, &o.obs[i], loc, ds) {
						ok = true
						break
					}
				}
			}
			if ok {
				out = append(out, strconv.FormatInt(loc.ID, 10))
			}
		}
	case query.Metadata:
		for _, ds := range o.datasets {
			ok := false
			switch {
			case needObs:
				for i := range o.obs {
					if o.obs[i].DOI == ds.DOI && o.eval(c, f, &o.obs[i], o.locByID[o.obs[i].LocationID], ds) {
						ok = true
						break
					}
				}
			case needLoc:
				for _, loc := range o.locations {
					if loc.DOI == ds.DOI && o.eval(c, f, nil, loc, ds) {
						ok = true
						break
					}
				}
			default:
				ok = o.eval(c, f, nil, nil, ds)
			}
			if ok {
				out = append(out, ds.ID)
			}
		}
		sort.Strings(out)
	}
	return out
}

// rowOf returns the expected row of an Id as the JSON decoder sees it.
func (o *oracle) rowOf(c *query.Collection, id string) map[string]any {
	cell := func(v sqlstore.Cell, k query.Kind) any {
		if !v.Valid {
			return nil
		}
		if k == query.KindFloat {
			return num(v.F)
		}
		return v.S
	}
	out := map[string]any{}
	switch c {
	case query.Observations, query.Records:
		n, _ := strconv.Atoi(id)
		ob := &o.obs[n-1]
		loc, ds := o.locByID[ob.LocationID], o.byDOI[ob.DOI]
		out["Id"] = json.Number(id)
		out["DOI"] = ob.DOI
		for i := 0; i < query.TailLen; i++ {
			f := query.Tail[i]
			out[f.Name] = cell(ob.Tail[i], f.Kind)
		}
		if c == query.Observations {
			out["LocationId"] = json.Number(strconv.FormatInt(loc.ID, 10))
			return out
		}
		out["DatasetName"] = ds.DatasetName
		for k, v := range o.locationRow(loc) {
			switch k {
			case "Id", "DOI":
			case "ID":
				out["MonitoringLocationID"] = v
			case "MonitoringLocationType":
				out[k] = v
			default:
				out["MonitoringLocation"+k] = v
			}
		}
	case query.Locations:
		n, _ := strconv.ParseInt(id, 10, 64)
		return o.locationRow(o.locByID[n])
	case query.Metadata:
		for _, ds := range o.datasets {
			if ds.ID == id {
				return datasetRow(ds)
			}
		}
	}
	return out
}

func num(f float64) json.Number {
	b, _ := json.Marshal(f)
	return json.Number(b)
}

func (o *oracle) locationRow(l *sqlstore.Location) map[string]any {
	cell := func(c sqlstore.Cell, isNum bool) any {
		if !c.Valid {
			return nil
		}
		if isNum {
			return num(c.F)
		}
		return c.S
	}
	return map[string]any{
		"Id": json.Number(strconv.FormatInt(l.ID, 10)), "DOI": l.DOI, "ID": l.MonitoringLocationID, "Name": l.Name,
		"Latitude": num(l.Latitude), "Longitude": num(l.Longitude), "HorizontalCoordinateReferenceSystem": l.HorizontalCRS,
		"HorizontalAccuracyMeasure": cell(l.HorizontalAccuracyMeasure, true), "HorizontalAccuracyUnit": cell(l.HorizontalAccuracyUnit, false),
		"VerticalMeasure": cell(l.VerticalMeasure, true), "VerticalUnit": cell(l.VerticalUnit, false),
		"MonitoringLocationType": l.Type,
	}
}

func datasetRow(d *sqlstore.Dataset) map[string]any {
	arr := func(a []string) any {
		out := make([]any, len(a))
		for i, s := range a {
			out[i] = s
		}
		return out
	}
	var src, extent any
	if d.DataSourceURL != nil {
		src = *d.DataSourceURL
	}
	if d.TemporalExtent != nil {
		extent = arr(d.TemporalExtent[:])
	}
	return map[string]any{
		"Id": d.ID, "DOI": d.DOI, "Version": d.Version, "DatasetName": d.DatasetName, "DataStewardEmail": d.DataStewardEmail,
		"DataCollectionOrganization": d.DataCollectionOrganization, "DataUploadOrganization": d.DataUploadOrganization,
		"ProgressCode": d.ProgressCode, "MaintenanceFrequencyCode": d.MaintenanceFrequencyCode, "Abstract": d.Abstract,
		"DataCollectionInformation": d.DataCollectionInformation, "DataProcessing": d.DataProcessing,
		"FundingSources": d.FundingSources, "DataSourceURL": src, "OtherDataSources": d.OtherDataSources,
		"Citation": d.Citation, "Licence": d.Licence, "Disclaimer": d.Disclaimer,
		"TopicCategoryCode": arr(d.TopicCategoryCode), "Keywords": arr(d.Keywords),
		"CreateTimestamp": d.CreateTimestamp, "PublishedTimestamp": d.PublishedTimestamp, "TemporalExtent": extent,
	}
}

// decodeBody undoes one content coding, as a client does; an unknown
// coding fails the test.
func decodeBody(t *testing.T, coding string, body io.Reader) io.Reader {
	t.Helper()
	switch coding {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			t.Fatal(err)
		}
		return zr
	case "br":
		return brotli.NewReader(body)
	case "zstd":
		zr, err := zstd.NewReader(body)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(zr.Close)
		return zr
	}
	t.Fatalf("unexpected Content-Encoding %q", coding)
	return nil
}
