package tracing_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's log throttle (the service's shards) outlives a test by design.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*tracing.Settings)
		want string
	}{
		{"off", func(s *tracing.Settings) { s.Protocol = "carrier pigeon" }, ""},
		{"defaults", func(s *tracing.Settings) { s.Enabled = true }, ""},
		{"grpc", func(s *tracing.Settings) { s.Enabled, s.Protocol = true, "grpc" }, ""},
		{"bad protocol", func(s *tracing.Settings) { s.Enabled, s.Protocol = true, "udp" }, "Invalid otlptrace client protocol: udp"},
		{"rate", func(s *tracing.Settings) { s.Enabled, s.SamplingRate = true, 1.5 }, "TRACING_SAMPLING_RATE"},
		{"compression", func(s *tracing.Settings) { s.Enabled, s.Compression = true, "zstd" }, "COMPRESSION"},
		{"endpoint", func(s *tracing.Settings) { s.Enabled, s.Endpoint = true, "http://" }, "not a URL"},
	} {
		s := tracing.DefaultSettings()
		tc.mod(&s)
		err := s.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", nil, false},
		{"a=1", map[string]string{"a": "1"}, false},
		{"authorization=Bearer%20x, b = 2,", map[string]string{"authorization": "Bearer x", "b": "2"}, false},
		{"a=%zz", nil, true},
		{"novalue", nil, true},
	} {
		got, err := tracing.ParseHeaders(tc.in)
		if (err != nil) != tc.err || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v", tc.in, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %v", tc.in, got)
			}
		}
	}
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{"", "a=1", "a=1,b=2", "k=%20v", "=", "a=%", ",,,", "x=y=z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := tracing.ParseHeaders(s)
		if err != nil {
			return
		}
		for k := range h {
			if k == "" {
				t.Fatalf("%q → empty key", s)
			}
		}
	})
}

const rules = "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 100}}\n"

// startService runs the service on loopback with tracing env on top; stop
// waits for Run to return, which flushes the spans.
func startService(t *testing.T, env map[string]string) (*server.Server, func()) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "DISABLE_STATS": "true",
	}
	for k, v := range env {
		vars[k] = v
	}
	settings, err := settings.FromEnv(settings.FromMap(vars))
	if err != nil {
		t.Fatal(err)
	}
	rs := rlsserver.Start(t, server.Options{Settings: settings})
	stop := func() {
		rs.Stop()
		http.DefaultClient.CloseIdleConnections()
	}
	t.Cleanup(stop)
	srv := rs.Server
	return srv, stop
}

func grpcDecide(t *testing.T, srv *server.Server, md metadata.MD) {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.NewOutgoingContext(context.Background(), md)
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
}

func httpDecide(t *testing.T, srv *server.Server, headers map[string]string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+srv.Addrs().HTTP.String()+"/json",
		strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"w"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/json: %d", resp.StatusCode)
	}
}

// one returns the only span matching pred.
func one(t *testing.T, spans []span, what string, pred func(span) bool) span {
	t.Helper()
	var found []span
	for _, s := range spans {
		if pred(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.name+"@"+s.traceID[:8])
		}
		t.Fatalf("%s: %d matching spans among %v", what, len(found), names)
	}
	return found[0]
}

const (
	w3cTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	w3cParent = "00f067aa0ba902b7"
	b3Trace   = "463ac35c9f6413ad48485a3953bb6124"
	b3Parent  = "0020000000000001"
)

func TestServiceSpans(t *testing.T) {
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			var col *collector
			if proto == "http" {
				col = startHTTPCollector(t)
			} else {
				col = startGRPCCollector(t)
			}
			srv, stop := startService(t, map[string]string{
				"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": proto,
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + col.addr, "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20s3cret",
				"TRACING_SERVICE_NAME": "rl-test", "TRACING_SERVICE_NAMESPACE": "ns", "TRACING_SERVICE_INSTANCE_ID": "i-1",
			})
			grpcDecide(t, srv, metadata.Pairs("traceparent", "00-"+w3cTrace+"-"+w3cParent+"-01"))
			httpDecide(t, srv, map[string]string{"X-B3-TraceId": b3Trace, "X-B3-SpanId": b3Parent, "X-B3-Sampled": "1", "baggage": "team=edge"})
			stop() // flushes the exporter

			spans := col.all()
			// gRPC: the caller's W3C context continues in the server span, the
			// decision is its child, the counter round trip the decision's.
			g := one(t, spans, "gRPC server span", func(s span) bool {
				return s.name == "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
			})
			if g.traceID != w3cTrace || g.parentID != w3cParent {
				t.Errorf("gRPC span trace %s parent %s", g.traceID, g.parentID)
			}
			dec := one(t, spans, "decision in the gRPC trace", func(s span) bool {
				return s.name == tracing.SpanDecision && s.traceID == w3cTrace
			})
			if dec.parentID != g.spanID || dec.attrs["domain"] != "d" || !strings.Contains(dec.attrs["request string"], "k=v") ||
				dec.attrs["overall code"] != "OK" {
				t.Errorf("decision span %+v", dec)
			}
			cnt := one(t, spans, "counter span", func(s span) bool {
				return s.name == tracing.CounterSpanName("memory") && s.traceID == w3cTrace
			})
			if cnt.parentID != dec.spanID || cnt.attrs["batch size"] != "1" || cnt.attrs["pipeline length"] != "1" {
				t.Errorf("counter span %+v", cnt)
			}

			// HTTP: B3 context continues in the HTTP span and the decision.
			h := one(t, spans, "HTTP span", func(s span) bool { return s.name == "POST /json" })
			if h.traceID != b3Trace || h.parentID != b3Parent {
				t.Errorf("HTTP span trace %s parent %s", h.traceID, h.parentID)
			}
			one(t, spans, "decision in the HTTP trace", func(s span) bool {
				return s.name == tracing.SpanDecision && s.traceID == b3Trace && s.parentID == h.spanID
			})

			// The shards' backend calls, with their batch sizes, in traces of their own.
			var batches int
			for _, s := range spans {
				if s.name == tracing.SpanBatch {
					batches++
					if s.parentID != "" || s.attrs["batch size"] != "1" || s.attrs["backend"] != "memory" {
						t.Errorf("batch span %+v", s)
					}
				}
			}
			if batches != 2 {
				t.Errorf("%d backend batch spans, want 2", batches)
			}
			if r := g.resource; r["service.name"] != "rl-test" || r["service.namespace"] != "ns" || r["service.instance.id"] != "i-1" {
				t.Errorf("resource %v", r)
			}
			if h := col.lastHeaders(); h["authorization"] != "Bearer s3cret" {
				t.Errorf("exporter headers %v", h)
			}
		})
	}
}

// TRACING_SAMPLING_RATE=0 samples nothing new, but a sampled caller's trace
// is still followed (parent-based sampling).
func TestSamplingFollowsParent(t *testing.T) {
	col := startHTTPCollector(t)
	srv, stop := startService(t, map[string]string{
		"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "0",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + col.addr + "/v1/traces",
	})
	grpcDecide(t, srv, nil)
	grpcDecide(t, srv, metadata.Pairs("traceparent", "00-"+w3cTrace+"-"+w3cParent+"-01"))
	stop()
	var decisions []span
	for _, s := range col.all() {
		if s.name == tracing.SpanDecision {
			decisions = append(decisions, s)
		}
	}
	if len(decisions) != 1 || decisions[0].traceID != w3cTrace {
		t.Fatalf("decision spans %+v, want only the one in the sampled caller's trace", decisions)
	}
}

func TestSettingsFromEnv(t *testing.T) {
	s, err := settings.FromEnv(settings.FromMap(map[string]string{"BACKEND_TYPE": "memory"}))
	if err != nil {
		t.Fatal(err)
	}
	if tr := s.Tracing; tr.Enabled || tr.Protocol != "http" || tr.ServiceName != "RateLimit" || tr.SamplingRate != 1 {
		t.Errorf("defaults %+v", tr)
	}
	s, err = settings.FromEnv(settings.FromMap(map[string]string{"BACKEND_TYPE": "memory",
		"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "GRPC", "OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1500", "OTEL_EXPORTER_OTLP_TIMEOUT": "99", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}))
	if err != nil {
		t.Fatal(err)
	}
	if tr := s.Tracing; tr.Protocol != "grpc" || !tr.Insecure || tr.Timeout != 1500*time.Millisecond || tr.Compression != "gzip" {
		t.Errorf("%+v", tr)
	}
	_, err = settings.FromEnv(settings.FromMap(map[string]string{"BACKEND_TYPE": "memory",
		"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "thrift"}))
	if err == nil || !strings.Contains(err.Error(), "Invalid otlptrace client protocol: thrift") {
		t.Errorf("bad protocol: %v", err)
	}
}
