package odata_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/odata"
)

// scrape reads a Prometheus text exposition into its families.
func scrape(t *testing.T, c *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// sample finds the series of name whose labels are exactly labels
// ("k=v,k=v"); ok is false when there is none.
func sample(mfs map[string]*dto.MetricFamily, name, labels string) (m *dto.Metric, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return nil, false
	}
	for _, m := range mf.Metric {
		var parts []string
		for _, l := range m.Label {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(parts)
		want := strings.Split(labels, ",")
		if labels == "" {
			want = nil
		}
		sort.Strings(want)
		if strings.Join(parts, ",") == strings.Join(want, ",") {
			return m, true
		}
	}
	return nil, false
}

// value is a counter's or gauge's value, or a histogram's count.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name, labels string) float64 {
	t.Helper()
	m, ok := sample(mfs, name, labels)
	if !ok {
		t.Errorf("no series %s{%s}", name, labels)
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s{%s} is of no known kind", name, labels)
	return 0
}

func seriesCount(mfs map[string]*dto.MetricFamily) int {
	n := 0
	for _, mf := range mfs {
		n += len(mf.Metric)
	}
	return n
}

// A mixed workload — pages as JSON and CSV, identity, gzip and br, a bad
// query, missing and unknown keys, a throttled address, a request refused
// while its key's stream holds the turn, a stream its client cuts — shows
// up in /metrics with exact counts, SQLite and PostgreSQL.
func TestMetricsCountMixedWorkload(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			opts := testOptions()
			opts.Metrics = odata.NewMetrics()
			opts.MetricsPath = "/metrics"
			opts.Brotli = true
			opts.Sequential = true // a streaming page holds its key's turn
			opts.PaceQueue = 1     // one request may wait for it; the next gets 429
			opts.KeyFailures = 2
			e := newEnv(t, b, gen12k, opts, nil)
			c := newClient(t)
			metricsURL := strings.TrimSuffix(e.base, opts.Root) + "/metrics"
			identityBytes := map[string]int{} // collection → body bytes sent without coding

			check := func(r response, want int, coll string) response {
				t.Helper()
				if r.status != want {
					t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
				}
				if r.header.Get("Content-Encoding") == "" {
					identityBytes[coll] += len(r.body)
				}
				// A page's turn is released once the server has closed its
				// body, which may be just after its client read the last
				// byte: the next request must not find it held by chance.
				for deadline := time.Now().Add(20 * time.Second); value(t, scrape(t, c, metricsURL), "sluice_odata_requests_in_flight", "") != 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("a finished request stays in flight")
					}
				}
				return r
			}
			r := check(e.get(c, e.base+"/Observations?$top=5&$filter="+url.QueryEscape("CharacteristicName eq 'pH'")), 200, "Observations")
			obsRows := len(decodePage(t, r.body).rows)
			check(e.get(c, e.base+"/Locations?$top=3", "Accept-Encoding", "gzip"), 200, "Locations")
			if r := check(e.get(c, e.base+"/Records?$top=4", "Accept-Encoding", "br, gzip"), 200, "Records"); r.header.Get("Content-Encoding") != "br" {
				t.Fatalf("Content-Encoding %q, want br", r.header.Get("Content-Encoding"))
			}
			check(e.get(c, e.base+"/Observations?$top=2&$format=csv"), 200, "Observations")
			check(e.get(c, e.base+"/Observations?$filter="+url.QueryEscape("NoSuchField eq 1")), 400, "Observations")
			check(do(t, c, "GET", e.base+"/Observations"), 401, "Observations")
			check(do(t, c, "GET", e.base+"/Observations", "x-api-key", "unknown-1"), 403, "Observations")
			check(do(t, c, "GET", e.base+"/Observations", "x-api-key", "unknown-2"), 403, "Observations")
			check(do(t, c, "GET", e.base+"/Observations", "x-api-key", "unknown-3"), 429, "Observations")

			// A page larger than the socket buffers, read by nobody: it
			// holds the key's turn, so the next request of the key waits
			// and the one after it is refused; then the page's client goes
			// away mid-body, and the waiting request is served.
			sr := openSlowRead(t, e.base+"/Records?$top=10000", e.key)
			if sr.resp.StatusCode != 200 {
				t.Fatalf("slow read: status %d", sr.resp.StatusCode)
			}
			waited := make(chan response, 1)
			go func() {
				req, _ := http.NewRequest("GET", e.base+"/Observations?$top=1", nil)
				req.Header.Set("x-api-key", e.key)
				resp, err := newClient(t).Do(req)
				if err != nil {
					waited <- response{}
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				waited <- response{status: resp.StatusCode, header: resp.Header, body: body}
			}()
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if n, _ := odata.Waiting(e.srv); n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second request of the key never waited")
				}
			}
			if got := value(t, scrape(t, c, metricsURL), "sluice_odata_pacing_waiting", ""); got != 1 {
				t.Errorf("pacing_waiting %v while one request waits", got)
			}
			if r := e.get(c, e.base+"/Observations?$top=1"); r.status != 429 {
				t.Fatalf("status %d with one request waiting, want 429", r.status)
			} else {
				identityBytes["Observations"] += len(r.body)
			}
			sr.close()
			check(<-waited, 200, "Observations")

			// The cut body is recorded when the server's write fails.
			var mfs map[string]*dto.MetricFamily
			deadline := time.Now().Add(20 * time.Second)
			for {
				mfs = scrape(t, c, metricsURL)
				if m, ok := sample(mfs, "sluice_odata_requests_total", "code=200,coding=identity,collection=Records,format=json"); ok && m.Counter.GetValue() == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the cut stream was never recorded")
				}
				time.Sleep(10 * time.Millisecond)
			}

			for _, w := range []struct {
				name, labels string
				want         float64
			}{
				{"sluice_odata_requests_total", "code=200,coding=identity,collection=Observations,format=json", 2},
				{"sluice_odata_requests_total", "code=200,coding=gzip,collection=Locations,format=json", 1},
				{"sluice_odata_requests_total", "code=200,coding=br,collection=Records,format=json", 1},
				{"sluice_odata_requests_total", "code=200,coding=identity,collection=Observations,format=csv", 1},
				{"sluice_odata_requests_total", "code=400,coding=identity,collection=Observations,format=json", 1},
				{"sluice_odata_requests_total", "code=401,coding=identity,collection=Observations,format=json", 1},
				{"sluice_odata_requests_total", "code=403,coding=identity,collection=Observations,format=json", 2},
				{"sluice_odata_requests_total", "code=429,coding=identity,collection=Observations,format=json", 2},
				{"sluice_odata_first_byte_seconds", "collection=Observations", 9},
				{"sluice_odata_last_byte_seconds", "collection=Observations", 9},
				{"sluice_odata_first_byte_seconds", "collection=Records", 2},
				{"sluice_odata_last_byte_seconds", "collection=Locations", 1},
				{"sluice_odata_rows_total", "collection=Observations", float64(obsRows + 2 + 1)},
				{"sluice_odata_rows_total", "collection=Locations", 3},
				{"sluice_odata_query_cost", "collection=Observations", 3},
				{"sluice_odata_query_cost", "collection=Records", 2},
				{"sluice_odata_response_bytes_total", "coding=identity,collection=Observations", float64(identityBytes["Observations"])},
				{"sluice_odata_refused_total", "reason=queue_full", 1},
				{"sluice_odata_refused_total", "reason=key_throttled", 1},
				{"sluice_odata_refused_total", "reason=rate", 0},
				{"sluice_odata_key_check_failures_total", "reason=missing", 1},
				{"sluice_odata_key_check_failures_total", "reason=unknown", 2},
				{"sluice_odata_streams_cut_total", "reason=client_gone", 1},
				{"sluice_odata_streams_cut_total", "reason=stall_preempt", 0},
				{"sluice_odata_pacing_waited_total", "", 1},
				{"sluice_odata_pacing_waiting", "", 0},
				{"sluice_odata_requests_in_flight", "", 0},
				{"sluice_odata_data_slots_in_use", "", 0},
				{"sluice_odata_db_connections_in_use", "", 0},
				{"sluice_odata_db_connections_max", "", float64(e.db.MaxConns())},
				{"sluice_odata_data_slots_max", "", float64(e.srv.MaxQueries())},
			} {
				if got := value(t, mfs, w.name, w.labels); got != w.want {
					t.Errorf("%s{%s} = %v, want %v", w.name, w.labels, got, w.want)
				}
			}
			// The cut page sent some of its rows, not all of them.
			if got := value(t, mfs, "sluice_odata_rows_total", "collection=Records"); got <= 4 || got >= 4+10000 {
				t.Errorf("Records rows %v: want the 4 of the br page and part of the cut one", got)
			}
			for _, coding := range []string{"gzip", "br"} {
				coll := map[string]string{"gzip": "Locations", "br": "Records"}[coding]
				if got := value(t, mfs, "sluice_odata_response_bytes_total", "coding="+coding+",collection="+coll); got <= 0 {
					t.Errorf("no %s bytes counted", coding)
				}
			}
			// The one filter cost an index range.
			m, _ := sample(mfs, "sluice_odata_query_cost", "collection=Observations")
			if m.Histogram.GetSampleSum() != 4 {
				t.Errorf("query cost sum %v", m.Histogram.GetSampleSum())
			}
			// The costliest keys are a bounded summary, named by key id.
			top := odata.TopKeys(e.srv, 5)
			if len(top) != 1 || !strings.HasPrefix(top[0].Key, "key:") || top[0].Requests != 6 || top[0].Cost != 4 {
				t.Errorf("top keys %+v: want the test key with its 6 pages and their filter cost", top)
			}
		})
	}
}

// Ten thousand distinct keys (a tenth real, the rest unknown) and as many
// distinct filters add no series: labels take no value a caller chooses.
func TestMetricsCardinalityBounded(t *testing.T) {
	opts := testOptions()
	opts.Metrics = odata.NewMetrics()
	opts.MetricsPath = "/metrics"
	opts.KeyFailures = 0
	e := newEnv(t, backends()[0], smallData, opts, nil)
	ctx := context.Background()
	const total, real = 10_000, 1_000
	keys := make([]string, total)
	for i := range keys {
		if i < real {
			k, _, err := e.db.AddKey(ctx, fmt.Sprintf("k%d", i))
			if err != nil {
				t.Fatal(err)
			}
			keys[i] = k
		} else {
			keys[i] = fmt.Sprintf("unknown-%d", i)
		}
	}
	c := newClient(t)
	metricsURL := strings.TrimSuffix(e.base, opts.Root) + "/metrics"
	send := func(from, to int) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					// Real keys every tenth request, so both kinds come
					// early and late.
					k := keys[(i%10)*real+i/10]
					u := e.base + "/Observations?$top=1&$filter=" + url.QueryEscape(fmt.Sprintf("CharacteristicName eq 'pH %d' or CharacteristicName eq 'pH'", i))
					req, _ := http.NewRequest("GET", u, nil)
					req.Header.Set("x-api-key", k)
					resp, err := c.Do(req)
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if want := map[bool]int{true: 200, false: 403}[i%10 == 0]; resp.StatusCode != want {
						t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
					}
				}
			}()
		}
		for i := from; i < to; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	send(0, 1000)
	early := seriesCount(scrape(t, c, metricsURL))
	send(1000, total)
	mfs := scrape(t, c, metricsURL)
	if late := seriesCount(mfs); late != early {
		t.Errorf("%d series after 1,000 requests, %d after %d distinct keys and filters", early, late, total)
	}
	if got := value(t, mfs, "sluice_odata_key_check_failures_total", "reason=unknown"); got != total-real {
		t.Errorf("unknown keys counted %v, want %d", got, total-real)
	}
	if got := value(t, mfs, "sluice_odata_requests_total", "code=200,coding=identity,collection=Observations,format=json"); got != real {
		t.Errorf("pages counted %v, want %d", got, real)
	}
	top := odata.TopKeys(e.srv, 1000)
	if len(top) > 256 {
		t.Errorf("the costliest-key summary holds %d keys, more than its bound of 256", len(top))
	}
	t.Logf("%d series after %d requests with distinct keys and filters; top keys held %d", early, total, len(top))
	raw, _ := json.Marshal(top[:min(3, len(top))])
	t.Logf("top keys: %s", raw)
}
