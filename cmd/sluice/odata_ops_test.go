package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/settings"
)

// servePair starts what `sluice serve` starts, with env for the rate limit
// service and args for the OData API, and stops both at the end of the test.
func servePair(t *testing.T, env map[string]string, args ...string) (*rateLimit, *odataService) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := odataFlags(fs)
	db := "sqlite:" + filepath.Join(t.TempDir(), "o.sqlite")
	if err := fs.Parse(append([]string{"-db", db, "-odata-addr", "127.0.0.1:0", "-demo-rows", "500", "-access-log=false"}, args...)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c.opts.Metrics = odata.NewMetrics()
	plan, err := planRateLimit(settings.FromMap(serverEnv(t, env, "")))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	rl, err := plan.start(ctx, c.opts.Metrics)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	c.joinRateLimit(plan)
	od, err := startOData(ctx, c, rl.log)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	ready, rlDone, odDone := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	generated := make(chan struct{})
	go func() { rlDone <- rl.run(ctx, ready) }()
	go func() { odDone <- od.run(ctx, c.drain, rl.log, func() { close(generated) }) }()
	waitStarted(t, ready, rlDone)
	waitStarted(t, generated, odDone)
	t.Cleanup(func() {
		stop()
		if err := <-rlDone; err != nil {
			t.Errorf("rate limit: %v", err)
		}
		if err := <-odDone; err != nil {
			t.Errorf("odata: %v", err)
		}
	})
	return rl, od
}

func get(t *testing.T, url string, headers ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// With pull metrics on, one scrape of the pull metrics port has the rate
// limit service's statistics and the OData API's metrics, and the OData
// port serves none; without, the OData port serves its own. The costliest
// keys are on the debug port either way.
func TestServeODataMetrics(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	for _, pulled := range []bool{true, false} {
		name := map[bool]string{true: "pull metrics port", false: "odata port"}[pulled]
		t.Run(name, func(t *testing.T) {
			env, args := map[string]string{}, []string{"-odata-metrics-path", "/metrics"}
			if pulled {
				env = map[string]string{"DISABLE_STATS": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0"}
			}
			rl, od := servePair(t, env, args...)
			odataBase := "http://" + od.ln.Addr().String()
			// Go's client asks for gzip.
			if code, body := get(t, odataBase+"/v1/odata/v4/Observations?$top=3", "x-api-key", od.demoKey); code != 200 {
				t.Fatalf("page: %d %s", code, body)
			}
			scrapeURL := odataBase + "/metrics"
			if pulled {
				scrapeURL = "http://" + rl.srv.MetricsAddr().String() + rl.metricsPath
				if code, _ := get(t, odataBase+"/metrics"); code != 404 {
					t.Errorf("the OData port answers /metrics with %d while the pull metrics port serves them", code)
				}
			} else if rl.srv.MetricsAddr() != nil {
				t.Fatal("a pull metrics port without USE_PROMETHEUS")
			}
			// The page's body is recorded once it closes, just after its
			// last byte was read.
			var body string
			testenv.Eventually(t, "the page in the scrape of "+scrapeURL, func() bool {
				_, body = get(t, scrapeURL)
				return strings.Contains(body, `sluice_odata_requests_total{code="200",coding="gzip",collection="Observations",format="json"} 1`)
			})
			if pulled && !strings.Contains(body, "ratelimit_service_") {
				t.Errorf("the pull metrics scrape lacks the rate limit statistics")
			}
			code, body := get(t, "http://"+rl.srv.Addrs().Debug.String()+"/odata/topkeys")
			var top []odata.TopKey
			if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil || len(top) != 1 || top[0].Requests != 1 {
				t.Errorf("/odata/topkeys: %d %s (%v)", code, body, err)
			}
		})
	}
}

// otlpSpan is one span an OTLP collector received.
type otlpSpan struct {
	name, id, parent string
	attrs            map[string]string
}

// startCollector is an OTLP/HTTP trace receiver that keeps every span.
func startCollector(t *testing.T) (endpoint string, spans func() []otlpSpan) {
	t.Helper()
	var mu sync.Mutex
	var got []otlpSpan
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(raw, req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					attrs := map[string]string{}
					for _, a := range s.GetAttributes() {
						v := a.GetValue()
						attrs[a.GetKey()] = strings.Trim(v.String(), " ")
					}
					got = append(got, otlpSpan{name: s.GetName(), id: hex.EncodeToString(s.GetSpanId()),
						parent: hex.EncodeToString(s.GetParentSpanId()), attrs: attrs})
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/v1/traces", func() []otlpSpan {
		mu.Lock()
		defer mu.Unlock()
		return append([]otlpSpan(nil), got...)
	}
}

// With TRACING_ENABLED an OData page is one server span with its
// collection, status and rows, whose children are the key check, the rate
// limit decision and the database work (probe, page size, rows).
func TestServeODataTraces(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	endpoint, spans := startCollector(t)
	_, od := servePair(t, map[string]string{"TRACING_ENABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint})
	if code, body := get(t, "http://"+od.ln.Addr().String()+"/v1/odata/v4/Observations?$top=3&$filter=CharacteristicName%20eq%20'pH'", "x-api-key", od.demoKey); code != 200 {
		t.Fatalf("page: %d %s", code, body)
	}
	// The batch processor exports within its delay (5 s).
	want := []string{"odata.check_key", "odata.rate_limit", "odata.probe", "odata.page_size", "odata.rows"}
	var req *otlpSpan
	testenv.Eventually(t, fmt.Sprintf("a request span with children %v", want), func() bool {
		all := spans()
		req = nil
		for i, s := range all {
			if s.name == "odata GET Observations" {
				req = &all[i]
			}
		}
		if req == nil {
			return false
		}
		children := map[string]bool{}
		for _, s := range all {
			if s.parent == req.id {
				children[s.name] = true
			}
		}
		for _, w := range want {
			if !children[w] {
				return false
			}
		}
		return true
	})
	for k, v := range map[string]string{"odata.collection": "Observations", "http.response.status_code": "200", "odata.rows": "3"} {
		if !strings.Contains(req.attrs[k], v) {
			t.Errorf("request span %s = %q, want %s", k, req.attrs[k], v)
		}
	}
}

// With a remote rate limit service, the request's trace goes on into it:
// the OData API's rate limit span has the gRPC client call as its child,
// and the service's own span is that call's child.
func TestServeODataTraceIntoRemoteLimiter(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	endpoint, spans := startCollector(t)
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	_, od := servePair(t, map[string]string{"TRACING_ENABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "GRPC_PORT": fmt.Sprint(ports[0])},
		"-rate-limit-service", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if code, body := get(t, "http://"+od.ln.Addr().String()+"/v1/odata/v4/Locations?$top=1", "x-api-key", od.demoKey); code != 200 {
		t.Fatalf("page: %d %s", code, body)
	}
	var chain []string
	testenv.Eventually(t, "the rate limit span's trace into the remote service", func() bool {
		all := spans()
		childOf := func(parent string) *otlpSpan {
			for i := range all {
				if parent != "" && all[i].parent == parent {
					return &all[i]
				}
			}
			return nil
		}
		chain = chain[:0]
		for i := range all {
			if all[i].name != "odata.rate_limit" {
				continue
			}
			client := childOf(all[i].id)
			if client == nil {
				continue
			}
			if server := childOf(client.id); server != nil {
				chain = append(chain, all[i].name, client.name, server.name)
				return true
			}
		}
		return false
	})
	t.Logf("span chain: %v", chain)
}
