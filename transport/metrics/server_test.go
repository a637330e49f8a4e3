package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	sluiceserver "github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

const probeRules = `domain: probe
descriptors:
  - {key: k, value: two, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: shadow, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`

// syncBuffer is the standard-output sink's destination in a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type server struct {
	srv  *sluiceserver.Server
	stop func()
}

// startServer runs a memory-backed rate limit service on loopback with the
// probe rules and env on top of the test defaults.
func startServer(t *testing.T, env map[string]string, stdout io.Writer) *server {
	t.Helper()
	vars := map[string]string{"STATS_FLUSH_INTERVAL": "1h"}
	for k, v := range env {
		vars[k] = v
	}
	settings := rlsserver.Settings(t, t.TempDir(), map[string]string{"probe.yaml": probeRules}, vars)
	rs := rlsserver.Start(t, sluiceserver.Options{Settings: settings,
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: logLevel(env["LOG_LEVEL"])})), StatsOutput: stdout})
	s := &server{srv: rs.Server, stop: func() {
		rs.Stop()
		http.DefaultClient.CloseIdleConnections()
	}}
	t.Cleanup(s.stop)
	return s
}

// hit sends n gRPC decisions for descriptor key=value in the probe domain.
func (s *server) hit(t *testing.T, n int, key, value string) {
	t.Helper()
	conn, err := grpc.NewClient(s.srv.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "probe", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
	for i := 0; i < n; i++ {
		if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

func metricValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		ok := len(got) == len(labels)
		for k, v := range labels {
			ok = ok && got[k] == v
		}
		if ok {
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no %s%v in %v", name, labels, mfs[name])
	return 0
}

// The service with Prometheus on: decisions show up at /metrics with the
// reference's names and labels.
func TestServicePullMetrics(t *testing.T) {
	s := startServer(t, map[string]string{"USE_STATSD": "false", "USE_PULLMETRICS": "true",
		"PULLMETRICS_ADDR": "127.0.0.1:0", "EXTRA_TAGS": "cluster:c1"}, nil)
	s.hit(t, 3, "k", "two")    // limit 2: within 2, over 1, near 1
	s.hit(t, 2, "shadow", "x") // limit 1, shadow: over 1, shadow_mode 1
	addr := s.srv.MetricsAddr()
	if addr == nil {
		t.Fatal("no metrics address")
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	c1 := func(kv ...string) map[string]string {
		m := map[string]string{"cluster": "c1"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ratelimit_service_rate_limit_total_hits", c1("domain", "probe", "key1", "k_two"), 3},
		{"ratelimit_service_rate_limit_within_limit", c1("domain", "probe", "key1", "k_two"), 2},
		{"ratelimit_service_rate_limit_near_limit", c1("domain", "probe", "key1", "k_two"), 1},
		{"ratelimit_service_rate_limit_over_limit", c1("domain", "probe", "key1", "k_two"), 1},
		{"ratelimit_service_rate_limit_shadow_mode", c1("domain", "probe", "key1", "shadow"), 1},
		{"ratelimit_service_total_requests", c1("grpc_method", "ShouldRateLimit"), 5},
		{"ratelimit_service_response_time_seconds", c1("grpc_method", "ShouldRateLimit"), 5},
		{"ratelimit_service_config_load_success", c1(), 1},
	} {
		if got := metricValue(t, mfs, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	s.stop()
	if _, err := http.Get("http://" + addr.String() + "/metrics"); err == nil {
		t.Error("the metrics server still answers after shutdown")
	}
}

// logLevel is the slog level of a LOG_LEVEL value (info when empty).
func logLevel(s string) slog.Level {
	if strings.EqualFold(s, "debug") {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// USE_STATSD=false prints to standard output (with LOG_LEVEL=debug: the
// lines are debug lines); the final flush at shutdown carries what happened
// since the last one.
func TestServiceStdoutStats(t *testing.T) {
	var out syncBuffer
	s := startServer(t, map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "debug"}, &out)
	s.hit(t, 3, "k", "two")
	s.stop()
	got := out.String()
	for _, want := range []string{
		`"msg":"flushing counter","json":{"name":"ratelimit.service.rate_limit.probe.k_two.over_limit","type":"counter","value":"1.000000"}`,
		`"json":{"name":"ratelimit.service.rate_limit.probe.k_two.total_hits","type":"counter","value":"3.000000"}`,
		`"json":{"name":"ratelimit_server.ShouldRateLimit.total_requests","type":"counter","value":"3.000000"}`,
		`"json":{"name":"ratelimit.service.config_load_success","type":"counter","value":"1.000000"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %s\n%s", want, got)
		}
	}
	if strings.Contains(got, "shadow.total_hits") {
		t.Errorf("counters that never moved were printed:\n%s", got)
	}
}

// With every sink off and the log level above debug, nothing is printed:
// neither the runtime gauges that change at every flush with no traffic at
// all, nor the decisions' counters.
func TestServiceStdoutStatsQuietAboveDebug(t *testing.T) {
	var out syncBuffer
	s := startServer(t, map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "info"}, &out)
	s.hit(t, 3, "k", "two")
	s.stop()
	if got := out.String(); got != "" {
		t.Fatalf("statistics printed at LOG_LEVEL=info:\n%s", got)
	}
}

// The default sink is statsd over TCP; the statistics arrive with EXTRA_TAGS.
func TestServiceStatsd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 256)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	s := startServer(t, map[string]string{"STATSD_HOST": "127.0.0.1",
		"STATSD_PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), "EXTRA_TAGS": "env:test"}, nil)
	s.hit(t, 3, "k", "two")
	s.stop()
	want := "ratelimit.service.rate_limit.probe.k_two.over_limit.__env=test:1|c"
	deadline := time.After(5 * time.Second)
	var seen []string
	for {
		select {
		case l := <-lines:
			seen = append(seen, l)
			if l == want {
				ln.Close()
				wg.Wait()
				return
			}
		case <-deadline:
			t.Fatalf("no %q in %q", want, seen)
		}
	}
}

// Two sinks at once is the reference's startup error.
func TestServiceSeveralSinks(t *testing.T) {
	_, err := settings.FromEnv(settings.FromMap(map[string]string{"USE_PROMETHEUS": "true", "BACKEND_TYPE": "memory"}))
	if err == nil || !strings.Contains(err.Error(), "unable to use more than one stats sink at the same time") {
		t.Fatalf("USE_PROMETHEUS with the default USE_STATSD: %v", err)
	}
	_, err = settings.FromEnv(settings.FromMap(map[string]string{"USE_PROMETHEUS": "true", "DISABLE_STATS": "true", "BACKEND_TYPE": "memory"}))
	if err != nil {
		t.Fatalf("DISABLE_STATS wins: %v", err)
	}
}

func TestStatsSettingsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, s settings.Settings)
	}{
		{"defaults", nil, func(t *testing.T, s settings.Settings) {
			st := s.Stats
			if !st.UseStatsd || st.StatsdHost != "localhost" || st.StatsdPort != 8125 || st.FlushInterval != 10*time.Second ||
				st.UsePull || st.UseTagged || st.Disabled || st.PullAddr != ":9090" || st.PullPath != "/metrics" {
				t.Errorf("%+v", st)
			}
		}},
		{"neutral pull names", map[string]string{"USE_STATSD": "false", "USE_PULLMETRICS": "true", "PULLMETRICS_ADDR": ":9191",
			"PULLMETRICS_PATH": "/m", "PULLMETRICS_MAPPER_YAML": "/x.yaml", "STATS_FLUSH_INTERVAL": "2s"}, func(t *testing.T, s settings.Settings) {
			st := s.Stats
			if !st.UsePull || st.PullAddr != ":9191" || st.PullPath != "/m" || st.PullMapperFile != "/x.yaml" || st.FlushInterval != 2*time.Second {
				t.Errorf("%+v", st)
			}
		}},
		{"tagged statsd with mogrifiers, upstream names", map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true",
			"USE_DOG_STATSD_MOGRIFIERS": "A,B", "DOG_STATSD_MOGRIFIER_A_PATTERN": `^a\.(.*)$`, "DOG_STATSD_MOGRIFIER_A_NAME": "a",
			"DOG_STATSD_MOGRIFIER_A_TAGS": "rest:$1,x:y", "DOG_STATSD_MOGRIFIER_B_PATTERN": "^b"}, func(t *testing.T, s settings.Settings) {
			m := s.Stats.Mogrifiers
			if !s.Stats.UseTagged || len(m) != 2 || m[0].Pattern != `^a\.(.*)$` || m[0].NewName != "a" || m[0].Tags["rest"] != "$1" ||
				m[0].Tags["x"] != "y" || m[1].Label != "B" || m[1].Pattern != "^b" {
				t.Errorf("%+v", s.Stats)
			}
		}},
		{"tagged statsd, neutral names", map[string]string{"USE_STATSD": "false", "USE_TAGGED_STATSD": "true",
			"TAGGED_STATSD_MOGRIFIERS": "T", "TAGGED_STATSD_MOGRIFIERS_T_PATTERN": "^t", "TAGGED_STATSD_MOGRIFIERS_T_NAME": "n"}, func(t *testing.T, s settings.Settings) {
			m := s.Stats.Mogrifiers
			if !s.Stats.UseTagged || len(m) != 1 || m[0].Pattern != "^t" || m[0].NewName != "n" {
				t.Errorf("%+v", s.Stats)
			}
		}},
		{"extra tags", map[string]string{"EXTRA_TAGS": "a:1, b:2"}, func(t *testing.T, s settings.Settings) {
			if len(s.Stats.ExtraTags) != 2 || s.Stats.ExtraTags["a"] != "1" || s.Stats.ExtraTags["b"] != "2" {
				t.Errorf("%v", s.Stats.ExtraTags)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"BACKEND_TYPE": "memory"}
			for k, v := range tc.env {
				env[k] = v
			}
			s, err := settings.FromEnv(settings.FromMap(env))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
	for _, env := range []map[string]string{
		{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "A", "DOG_STATSD_MOGRIFIER_A_PATTERN": "("},
		{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "USE_PULLMETRICS": "true"},
		{"STATS_FLUSH_INTERVAL": "soon"},
		{"USE_PROMETHEUS": "true", "USE_PULLMETRICS": "false"},
	} {
		env["BACKEND_TYPE"] = "memory"
		if _, err := settings.FromEnv(settings.FromMap(env)); err == nil {
			t.Errorf("%v: no error", env)
		}
	}
}
