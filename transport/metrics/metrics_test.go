package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's log throttle (the service's shards) outlives a test by design.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

func TestSettingsValidate(t *testing.T) {
	base := DefaultSettings()
	with := func(f func(*Settings)) Settings { s := base; f(&s); return s }
	for _, tc := range []struct {
		name string
		s    Settings
		want string // "" = valid
	}{
		{"defaults", base, ""},
		{"statsd and pull", with(func(s *Settings) { s.UsePull = true }), ErrSeveralSinks.Error()},
		{"statsd and tagged", with(func(s *Settings) { s.UseTagged = true }), ErrSeveralSinks.Error()},
		{"tagged and pull", with(func(s *Settings) { s.UseStatsd, s.UseTagged, s.UsePull = false, true, true }), ErrSeveralSinks.Error()},
		{"disabled wins over everything", with(func(s *Settings) { s.Disabled, s.UseTagged, s.UsePull, s.FlushInterval = true, true, true, 0 }), ""},
		{"stdout", with(func(s *Settings) { s.UseStatsd = false }), ""},
		{"zero interval", with(func(s *Settings) { s.FlushInterval = 0 }), "STATS_FLUSH_INTERVAL"},
		{"no statsd port", with(func(s *Settings) { s.StatsdPort = 0 }), "STATSD_PORT"},
		{"tag key with a dot", with(func(s *Settings) { s.ExtraTags = map[string]string{"a.b": "x"} }), "EXTRA_TAGS"},
		{"tag key not a label", with(func(s *Settings) { s.UseStatsd, s.UsePull, s.ExtraTags = false, true, map[string]string{"a-b": "x"} }), "Prometheus label"},
		{"pull path", with(func(s *Settings) { s.UseStatsd, s.UsePull, s.PullPath = false, true, "metrics" }), "PROMETHEUS_PATH"},
		{"bad mogrifier", with(func(s *Settings) {
			s.UseStatsd, s.UseTagged, s.Mogrifiers = false, true, []Mogrifier{{Label: "X", Pattern: "("}}
		}), "mogrifier X"},
		{"mogrifier without pattern", with(func(s *Settings) {
			s.UseStatsd, s.UseTagged, s.Mogrifiers = false, true, []Mogrifier{{Label: "X", NewName: "n"}}
		}), "PATTERN is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	if got := ErrSeveralSinks.Error(); got != "Error: unable to use more than one stats sink at the same time. Set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS." {
		t.Errorf("message %q", got)
	}
}

// statsdServer is a TCP statsd server that collects the lines it receives.
type statsdServer struct {
	t     *testing.T
	ln    net.Listener
	lines chan string
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newStatsdServer(t *testing.T, addr string) *statsdServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{t: t, ln: ln, lines: make(chan string, 1024)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.lines <- sc.Text()
				}
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

// stop closes the listener and every connection, as a server going away.
func (s *statsdServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// take returns n lines, failing after a bounded wait.
func (s *statsdServer) take(n int) []string {
	s.t.Helper()
	var out []string
	deadline := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case l := <-s.lines:
			out = append(out, l)
		case <-deadline:
			s.t.Fatalf("got %d lines %q, want %d", len(out), out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (s *statsdServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func newReporter(t *testing.T, s Settings, st *stats.Store, o Options) *Reporter {
	t.Helper()
	r, err := New(s, st, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func statsdSettings(port int) Settings {
	s := DefaultSettings()
	s.StatsdHost, s.StatsdPort = "127.0.0.1", port
	s.FlushInterval = time.Hour // the tests flush by hand
	return s
}

func TestStatsdSinkLinesAndDeltas(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	st := stats.NewStore()
	s := statsdSettings(srv.port())
	s.ExtraTags = map[string]string{"env": "prod", "az": "eu.1"}
	r := newReporter(t, s, st, Options{})

	rs := engine.NewRuleStats(st, "probe.k_two")
	rs.TotalHits.Add(3)
	rs.OverLimit.Add(1)
	st.Gauge("ratelimit.localcache.entryCount").Set(7)
	st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(1500 * time.Microsecond)
	r.Flush()
	got := srv.take(4)
	want := []string{
		"ratelimit.localcache.entryCount.__az=eu_1.__env=prod:7|g",
		"ratelimit.service.rate_limit.probe.k_two.over_limit.__az=eu_1.__env=prod:1|c",
		"ratelimit.service.rate_limit.probe.k_two.total_hits.__az=eu_1.__env=prod:3|c",
		"ratelimit_server.ShouldRateLimit.response_time.__az=eu_1.__env=prod:1|ms",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Second flush: only the change of the counter that moved, and the gauge
	// (statsd gauges are sent every flush, as gostats does).
	rs.TotalHits.Add(2)
	r.Flush()
	got = srv.take(2)
	want = []string{
		"ratelimit.localcache.entryCount.__az=eu_1.__env=prod:7|g",
		"ratelimit.service.rate_limit.probe.k_two.total_hits.__az=eu_1.__env=prod:2|c",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("second flush:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A statsd server that is down costs dropped flushes, never a stuck flush;
// when it comes back (even on a connection the sink thinks is open) the
// statistics flow again.
func TestStatsdSinkServerDownAndBack(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	addr := srv.ln.Addr().String()
	st := stats.NewStore()
	r := newReporter(t, statsdSettings(srv.port()), st, Options{})
	c := st.Counter("ratelimit.service.config_load_success")

	c.Inc()
	r.Flush()
	if got := srv.take(1); got[0] != "ratelimit.service.config_load_success:1|c" {
		t.Fatalf("got %q", got)
	}

	srv.stop()
	for i := 0; i < 3; i++ {
		c.Inc()
		done := make(chan struct{})
		go func() { r.Flush(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("flush blocked with the statsd server down")
		}
	}

	srv2 := newStatsdServer(t, addr)
	c.Inc()
	r.Flush()
	// The three increments made while the server was down were dropped with
	// their flushes; the delta is counted from the last flush attempt.
	if got := srv2.take(1); got[0] != "ratelimit.service.config_load_success:1|c" {
		t.Fatalf("after restart got %q", got)
	}

	// A restart between two flushes: the sink still holds the old connection,
	// and a write to it would vanish without an error.
	srv2.stop()
	srv3 := newStatsdServer(t, addr)
	c.Add(5)
	r.Flush()
	if got := srv3.take(1); got[0] != "ratelimit.service.config_load_success:5|c" {
		t.Fatalf("after a quiet restart got %q", got)
	}
}

func TestFinalFlushOnClose(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	st := stats.NewStore()
	r, err := New(statsdSettings(srv.port()), st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	st.Counter("ratelimit.service.config_load_error").Add(2)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := srv.take(1); got[0] != "ratelimit.service.config_load_error:2|c" {
		t.Fatalf("got %q", got)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// The flush goroutine flushes by itself every interval.
func TestPeriodicFlush(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	st := stats.NewStore()
	s := statsdSettings(srv.port())
	s.FlushInterval = 20 * time.Millisecond
	newReporter(t, s, st, Options{})
	st.Counter("ratelimit.service.config_load_success").Inc()
	if got := srv.take(1); got[0] != "ratelimit.service.config_load_success:1|c" {
		t.Fatalf("got %q", got)
	}
}

func TestTaggedSinkWithMogrifiers(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	st := stats.NewStore()
	s := statsdSettings(pc.LocalAddr().(*net.UDPAddr).Port)
	s.UseStatsd, s.UseTagged = false, true
	s.ExtraTags = map[string]string{"env": "prod"}
	s.Mogrifiers = []Mogrifier{
		{Label: "RULE", Pattern: `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
			NewName: "ratelimit.service.rate_limit.$3", Tags: map[string]string{"domain": "$1", "descriptor": "$2"}},
		{Label: "SERVER", Pattern: `^ratelimit_server\.(.*)\.(total_requests|response_time)$`,
			NewName: "ratelimit_server.$2", Tags: map[string]string{"grpc_method": "$1"}},
	}
	r := newReporter(t, s, st, Options{})
	engine.NewRuleStats(st, "probe.k_two").OverLimit.Add(4)
	st.Counter("ratelimit_server.ShouldRateLimit.total_requests").Add(9)
	st.Counter("ratelimit.service.config_load_success").Inc()
	st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(2 * time.Millisecond)
	r.Flush()

	var got []string
	buf := make([]byte, 65536)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < 4 {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, strings.Split(string(buf[:n]), "\n")...)
	}
	sort.Strings(got)
	want := []string{
		"ratelimit.service.config_load_success:1|c|#env:prod",
		"ratelimit.service.rate_limit.over_limit:4|c|#descriptor:k_two,domain:probe,env:prod",
		"ratelimit_server.response_time:2|ms|#grpc_method:ShouldRateLimit,env:prod",
		"ratelimit_server.total_requests:9|c|#grpc_method:ShouldRateLimit,env:prod",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Many values are split into datagrams that each fit one frame.
func TestTaggedSinkSplitsPackets(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	st := stats.NewStore()
	s := statsdSettings(pc.LocalAddr().(*net.UDPAddr).Port)
	s.UseStatsd, s.UseTagged = false, true
	r := newReporter(t, s, st, Options{})
	const n = 200
	for i := 0; i < n; i++ {
		st.Counter("ratelimit.service.rate_limit.domain.key_" + strings.Repeat("v", i%40) + "_" + string(rune('a'+i%26)) + "." + string(rune('a'+i/26)) + ".total_hits").Inc()
	}
	r.Flush()
	lines := 0
	buf := make([]byte, 65536)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for lines < n {
		k, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d lines: %v", lines, err)
		}
		if k > maxDatagram {
			t.Fatalf("datagram of %d bytes", k)
		}
		lines += len(strings.Split(string(buf[:k]), "\n"))
	}
	if lines != n {
		t.Fatalf("%d lines, want %d", lines, n)
	}
}

func TestStdoutSinkFormatAndQuiet(t *testing.T) {
	st := stats.NewStore()
	s := DefaultSettings()
	s.UseStatsd = false
	s.FlushInterval = time.Hour
	var out bytes.Buffer
	now := time.Unix(1795313464, 123456000)
	r := newReporter(t, s, st, Options{Stdout: &out, Clock: func() time.Time { return now }})
	rs := engine.NewRuleStats(st, "probe.k_two") // six counters at zero: nothing to print
	rs.OverLimit.Inc()
	st.Gauge("ratelimit.localcache.entryCount").Set(2)
	r.Flush()
	want := `{"level":"debug","ts":1795313464.123456,"logger":"gostats.loggingsink","msg":"flushing gauge","json":{"name":"ratelimit.localcache.entryCount","type":"gauge","value":"2.000000"}}
{"level":"debug","ts":1795313464.123456,"logger":"gostats.loggingsink","msg":"flushing counter","json":{"name":"ratelimit.service.rate_limit.probe.k_two.over_limit","type":"counter","value":"1.000000"}}
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	r.Flush() // nothing changed: nothing printed
	if out.Len() != 0 {
		t.Fatalf("quiet flush printed %q", out.String())
	}
	st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(3 * time.Millisecond)
	r.Flush()
	var line logLine
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line.Msg != "flushing timer" || line.JSON["value"] != "3.000000" || line.JSON["samples"] != "" {
		t.Fatalf("timer line %q (%v)", out.String(), err)
	}
	// Many samples are one line: their mean and how many there were.
	out.Reset()
	for _, ms := range []time.Duration{1, 2, 6} {
		st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(ms * time.Millisecond)
	}
	r.Flush()
	line = logLine{}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line.JSON["value"] != "3.000000" || line.JSON["samples"] != "3" {
		t.Fatalf("timer summary %q (%v)", out.String(), err)
	}
}

func TestDisabledSendsNothing(t *testing.T) {
	st := stats.NewStore()
	s := DefaultSettings()
	s.Disabled, s.UseStatsd, s.UsePull = true, true, true // DISABLE_STATS wins
	var out bytes.Buffer
	r := newReporter(t, s, st, Options{Stdout: &out})
	if r.Sink() != "none" || r.Addr() != nil {
		t.Fatalf("sink %q addr %v", r.Sink(), r.Addr())
	}
	st.Counter("ratelimit.service.config_load_success").Inc()
	r.Flush()
	if err := r.Close(); err != nil || out.Len() != 0 {
		t.Fatalf("close %v, output %q", err, out.String())
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// find returns the metric of family name whose labels are exactly labels.
func find(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		var names []string
		for n := range mfs {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Fatalf("no family %s; have %v", name, names)
	}
	for _, m := range mf.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(labels) {
			match := true
			for k, v := range labels {
				if got[k] != v {
					match = false
				}
			}
			if match {
				return m
			}
		}
	}
	t.Fatalf("%s has no metric with labels %v: %v", name, labels, mf.Metric)
	return nil
}

func pullSettings() Settings {
	s := DefaultSettings()
	s.UseStatsd, s.UsePull = false, true
	s.PullAddr = "127.0.0.1:0"
	s.FlushInterval = time.Hour
	return s
}

func TestPullMetricsDefaultMapping(t *testing.T) {
	st := stats.NewStore()
	s := pullSettings()
	s.ExtraTags = map[string]string{"env": "prod"}
	r := newReporter(t, s, st, Options{})
	two := engine.NewRuleStats(st, "probe.k_two")
	two.TotalHits.Add(3)
	two.OverLimit.Add(1)
	two.NearLimit.Add(1)
	two.WithinLimit.Add(2)
	three := engine.NewRuleStats(st, "rl.foo_f.bar_b")
	three.ShadowMode.Add(5)
	deep := engine.NewRuleStats(st, "rl.a.b.c")
	deep.TotalHits.Add(6)
	st.Counter("ratelimit.service.call.should_rate_limit.redis_error").Add(2)
	st.Counter("ratelimit_server.ShouldRateLimit.total_requests").Add(4)
	st.Counter("ratelimit.service.config_load_success").Inc()
	st.Counter("ratelimit.service.config_load_error").Add(3)
	st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(250 * time.Millisecond)
	st.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(750 * time.Millisecond)
	st.Gauge("ratelimit.localcache.entryCount").Set(11)

	url := "http://" + r.Addr().String() + "/metrics"
	mfs := scrape(t, url) // a scrape flushes first
	for _, tc := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "probe", "key1": "k_two", "env": "prod"}, 3},
		{"ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "probe", "key1": "k_two", "env": "prod"}, 1},
		{"ratelimit_service_rate_limit_near_limit", map[string]string{"domain": "probe", "key1": "k_two", "env": "prod"}, 1},
		{"ratelimit_service_rate_limit_within_limit", map[string]string{"domain": "probe", "key1": "k_two", "env": "prod"}, 2},
		{"ratelimit_service_rate_limit_shadow_mode", map[string]string{"domain": "rl", "key1": "foo_f", "key2": "bar_b", "env": "prod"}, 5},
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "rl", "key1": "a", "key2": "b", "env": "prod"}, 6},
		{"ratelimit_service_should_rate_limit_error", map[string]string{"err_type": "redis_error", "env": "prod"}, 2},
		{"ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit", "env": "prod"}, 4},
		{"ratelimit_service_config_load_success", map[string]string{"env": "prod"}, 1},
		{"ratelimit_service_config_load_error", map[string]string{"env": "prod"}, 3},
		{"ratelimit_localcache_entryCount", map[string]string{"env": "prod"}, 11},
	} {
		m := find(t, mfs, tc.name, tc.labels)
		v := m.GetCounter().GetValue()
		if m.Gauge != nil {
			v = m.GetGauge().GetValue()
		}
		if v != tc.value {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, v, tc.value)
		}
	}
	h := find(t, mfs, "ratelimit_service_response_time_seconds", map[string]string{"grpc_method": "ShouldRateLimit", "env": "prod"}).GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 1.0 {
		t.Errorf("response time histogram: count %d sum %v, want 2 and 1.0 s", h.GetSampleCount(), h.GetSampleSum())
	}

	// Counters accumulate across flushes.
	two.TotalHits.Add(4)
	mfs = scrape(t, url)
	if v := find(t, mfs, "ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "probe", "key1": "k_two", "env": "prod"}).GetCounter().GetValue(); v != 7 {
		t.Errorf("total_hits after more hits = %v, want 7", v)
	}
}

func TestPullMetricsMapperFileAndMillis(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mapping.yaml")
	if err := os.WriteFile(path, []byte(`mappings:
  - match: "ratelimit.service.config_load_success"
    name: "custom_loads"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	st := stats.NewStore()
	s := pullSettings()
	s.PullMapperFile = path
	r := newReporter(t, s, st, Options{})
	st.Counter("ratelimit.service.config_load_success").Add(2)
	if v := find(t, scrape(t, "http://"+r.Addr().String()+"/metrics"), "custom_loads", nil).GetCounter().GetValue(); v != 2 {
		t.Errorf("custom_loads = %v", v)
	}

	st2 := stats.NewStore()
	s2 := pullSettings()
	s2.PullResponseTimeMillis = true
	r2 := newReporter(t, s2, st2, Options{})
	st2.Timer("ratelimit_server.ShouldRateLimit.response_time").Record(250 * time.Millisecond)
	h := find(t, scrape(t, "http://"+r2.Addr().String()+"/metrics"), "ratelimit_service_response_time_seconds", map[string]string{"grpc_method": "ShouldRateLimit"}).GetHistogram()
	if h.GetSampleSum() != 250 {
		t.Errorf("legacy milliseconds: sum %v, want 250", h.GetSampleSum())
	}

	bad := pullSettings()
	bad.PullMapperFile = filepath.Join(dir, "missing.yaml")
	if _, err := New(bad, stats.NewStore(), Options{}); err == nil {
		t.Error("a missing mapping file must fail at startup")
	}
}

func TestPullListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := pullSettings()
	s.PullAddr = ln.Addr().String()
	r, err := New(s, stats.NewStore(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err == nil || !strings.Contains(err.Error(), "pull metrics") {
		t.Fatalf("Start on a busy port: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMogrifyExpand(t *testing.T) {
	ts, err := newTaggedSink("127.0.0.1:1", nil, []Mogrifier{
		{Label: "A", Pattern: `^a\.(x)(y)?\.(.*)$`, NewName: "n.$3.$1$2", Tags: map[string]string{"t": "$3,|"}},
		{Label: "B", Pattern: `^b`, Tags: map[string]string{"k": "v"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in, name string
		tags     []string
	}{
		{"a.xy.rest", "n.rest.xy", []string{"t:rest__"}},
		{"a.x.r", "n.r.x", []string{"t:r__"}},
		{"b.keep", "b.keep", []string{"k:v"}},
		{"c.none", "c.none", nil},
	} {
		name, tags := ts.mogrify(tc.in)
		if name != tc.name || strings.Join(tags, ",") != strings.Join(tc.tags, ",") {
			t.Errorf("mogrify(%q) = %q %q, want %q %q", tc.in, name, tags, tc.name, tc.tags)
		}
	}
}

func FuzzMogrify(f *testing.F) {
	for _, s := range []string{"ratelimit.service.rate_limit.probe.k_two.over_limit", "$1$2", "", "a.b.c", "\n|,#"} {
		f.Add(s)
	}
	ts, err := newTaggedSink("127.0.0.1:1", nil, []Mogrifier{
		{Label: "R", Pattern: `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, NewName: "r.$3", Tags: map[string]string{"d": "$1", "k": "$2"}},
	}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		out, tags := ts.mogrify(name)
		if tags == nil && out != name {
			t.Fatalf("unmatched name changed: %q → %q", name, out)
		}
		for _, tag := range tags {
			if strings.ContainsAny(tag, ",|\n") {
				t.Fatalf("tag %q would break the line", tag)
			}
		}
	})
}

// BenchmarkFlushStatsd is one flush of 1000 rules' statistics (6000
// counters, a sixth of them moving) to a TCP statsd server that discards.
func BenchmarkFlushStatsd(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	st := stats.NewStore()
	var rules []engine.RuleStats
	for i := 0; i < 1000; i++ {
		rules = append(rules, engine.NewRuleStats(st, "bench.key_"+strconv.Itoa(i)))
	}
	s := statsdSettings(ln.Addr().(*net.TCPAddr).Port)
	r, err := New(s, st, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, rs := range rules {
			rs.TotalHits.Inc()
		}
		r.Flush()
	}
}

// A flush reports a released value's last change, then the store drops it and
// the reporter forgets it: a rule added again later starts from zero, with
// no negative (wrapped) delta. With DISABLE_STATS the flushes still release.
func TestFlushReleasesDroppedStats(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		st := stats.NewStore()
		s := DefaultSettings()
		s.UseStatsd, s.Disabled = false, disabled
		s.FlushInterval = time.Hour
		var out bytes.Buffer
		r := newReporter(t, s, st, Options{Stdout: &out})
		c := st.Counter("ratelimit.service.rate_limit.d.k.total_hits")
		c.Add(5)
		r.Flush()
		c.Add(2) // counted after the last flush, before the rule goes
		st.Release("ratelimit.service.rate_limit.d.k.total_hits")
		out.Reset()
		r.Flush() // reports the last change
		if !disabled && !strings.Contains(out.String(), `"value":"2.000000"`) {
			t.Fatalf("last change not reported: %q", out.String())
		}
		r.Flush() // dropped now
		if st.Len() != 0 {
			t.Fatalf("disabled=%v: %d values still held", disabled, st.Len())
		}
		r.mu.Lock()
		held := len(r.counters)
		r.mu.Unlock()
		if held != 0 {
			t.Fatalf("the reporter still remembers %d dropped values", held)
		}
		st.Counter("ratelimit.service.rate_limit.d.k.total_hits").Inc()
		out.Reset()
		r.Flush()
		if !disabled && !strings.Contains(out.String(), `"value":"1.000000"`) {
			t.Fatalf("a value named again: %q", out.String())
		}
	}
}

// TestRuntimeAndPoolStats: the reference's ratelimit.go.* runtime figures and
// ratelimit.redis_pool.* / redis_per_second_pool.* pool figures are refreshed
// at each flush, with gostats' kinds: gauges every flush, counters as the
// change since the last one.
func TestRuntimeAndPoolStats(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	st := stats.NewStore()
	r := newReporter(t, statsdSettings(srv.port()), st, Options{})
	RegisterRuntime(st)
	pool := PoolFigures{Active: 2, Opened: 3, LocalCloses: 1}
	RegisterPool(st, "ratelimit.redis_pool", func() PoolFigures { return pool })
	RegisterPool(st, "ratelimit.redis_per_second_pool", func() PoolFigures { return PoolFigures{Active: 1, Opened: 1} })

	// gostats registers 18 runtime values; lookups is never set (so never
	// sent), sys is a gauge stuck at 0. The pools add 2 + 3 lines
	// (cx_local_close of the per-second pool is 0, so not sent).
	const want = 17 + 3 + 2
	runtime.GC() // so that numGC and pauseTotalNs have moved and are sent
	r.Flush()
	lines := srv.take(want)
	byName := map[string]string{}
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ":")
		byName[name] = value
	}
	for name, wantValue := range map[string]string{
		"ratelimit.redis_pool.cx_active":            "2|g",
		"ratelimit.redis_pool.cx_total":             "3|c",
		"ratelimit.redis_pool.cx_local_close":       "1|c",
		"ratelimit.redis_per_second_pool.cx_active": "1|g",
		"ratelimit.redis_per_second_pool.cx_total":  "1|c",
		"ratelimit.go.sys":                          "0|g",
	} {
		if byName[name] != wantValue {
			t.Errorf("%s = %q, want %q", name, byName[name], wantValue)
		}
	}
	for _, name := range []string{"alloc", "heapAlloc", "heapSys", "heapIdle", "heapInuse", "heapReleased", "heapObjects", "nextGC", "lastGC", "gcCPUPercent", "numGoroutine"} {
		if v := byName["ratelimit.go."+name]; !strings.HasSuffix(v, "|g") {
			t.Errorf("ratelimit.go.%s = %q, want a gauge", name, v)
		}
	}
	for _, name := range []string{"totalAlloc", "mallocs", "frees", "numGC", "pauseTotalNs"} {
		if v := byName["ratelimit.go."+name]; !strings.HasSuffix(v, "|c") {
			t.Errorf("ratelimit.go.%s = %q, want a counter", name, v)
		}
	}
	if _, sent := byName["ratelimit.go.lookups"]; sent {
		t.Error("ratelimit.go.lookups sent; gostats never sets it")
	}
	if g := byName["ratelimit.go.numGoroutine"]; g == "0|g" {
		t.Error("numGoroutine is 0")
	}

	// The next flush sends the pool's new connections as a delta.
	pool = PoolFigures{Active: 1, Opened: 5, LocalCloses: 2}
	runtime.GC()
	r.Flush()
	got := map[string]string{}
	for {
		l := srv.take(1)[0]
		name, value, _ := strings.Cut(l, ":")
		got[name] = value
		if name == "ratelimit.redis_pool.cx_total" {
			break
		}
	}
	if got["ratelimit.redis_pool.cx_active"] != "1|g" || got["ratelimit.redis_pool.cx_local_close"] != "1|c" || got["ratelimit.redis_pool.cx_total"] != "2|c" {
		t.Errorf("second flush pool lines %v", got)
	}
	if !strings.HasSuffix(got["ratelimit.go.numGC"], "|c") {
		t.Errorf("numGC after a GC: %q", got["ratelimit.go.numGC"])
	}
}

// TestTimersInWholeMilliseconds: a timer is sent as gostats sends it, whole
// milliseconds (truncated) in every sink.
func TestTimersInWholeMilliseconds(t *testing.T) {
	srv := newStatsdServer(t, "127.0.0.1:0")
	st := stats.NewStore()
	r := newReporter(t, statsdSettings(srv.port()), st, Options{})
	tm := st.Timer("ratelimit_server.ShouldRateLimit.response_time")
	tm.Record(2904414 * time.Nanosecond)
	tm.Record(999 * time.Microsecond)
	r.Flush()
	if got := strings.Join(srv.take(2), " "); got != "ratelimit_server.ShouldRateLimit.response_time:0|ms ratelimit_server.ShouldRateLimit.response_time:2|ms" {
		t.Fatalf("lines %s", got)
	}
}

// TestRuntimeAndPoolStatsPulled: the same figures under the names
// statsd_exporter gives unmapped statsd names (the reference's default
// mapping has no rule for them either).
func TestRuntimeAndPoolStatsPulled(t *testing.T) {
	st := stats.NewStore()
	r := newReporter(t, pullSettings(), st, Options{})
	RegisterRuntime(st)
	RegisterPool(st, "ratelimit.redis_pool", func() PoolFigures { return PoolFigures{Active: 2, Opened: 3, LocalCloses: 1} })
	runtime.GC()
	mfs := scrape(t, "http://"+r.Addr().String()+"/metrics")
	if v := find(t, mfs, "ratelimit_redis_pool_cx_active", nil).GetGauge().GetValue(); v != 2 {
		t.Errorf("cx_active %v", v)
	}
	if v := find(t, mfs, "ratelimit_redis_pool_cx_total", nil).GetCounter().GetValue(); v != 3 {
		t.Errorf("cx_total %v", v)
	}
	if v := find(t, mfs, "ratelimit_go_numGoroutine", nil).GetGauge().GetValue(); v < 1 {
		t.Errorf("numGoroutine %v", v)
	}
	if v := find(t, mfs, "ratelimit_go_numGC", nil).GetCounter().GetValue(); v < 1 {
		t.Errorf("numGC %v", v)
	}
}

// Refresh runs before every flush, so a gauge read from elsewhere (the shard
// queue depth) is current in each scrape; the default mapping labels it.
func TestPullMetricsRefreshSetsGaugesBeforeEachScrape(t *testing.T) {
	st := stats.NewStore()
	depth := st.Gauge("sluice.shard.3.queue_depth")
	var source atomic.Int64
	r := newReporter(t, pullSettings(), st, Options{Refresh: func() { depth.Set(source.Load()) }})
	url := "http://" + r.Addr().String() + "/metrics"
	for _, want := range []int64{7, 0, 42} {
		source.Store(want)
		m := find(t, scrape(t, url), "sluice_shard_queue_depth", map[string]string{"shard": "3"})
		if got := m.GetGauge().GetValue(); got != float64(want) {
			t.Errorf("sluice_shard_queue_depth{shard=3} = %v, want %v", got, want)
		}
	}
}

// TestEveryFlushRunsTheCollectors: the store's collectors (the local cache's
// gauges, runtime figures) run before every flush, the final one on Close
// included, so the last figures sent are current.
func TestEveryFlushRunsTheCollectors(t *testing.T) {
	st := stats.NewStore()
	s := DefaultSettings()
	s.UseStatsd = false
	s.FlushInterval = time.Hour
	var out bytes.Buffer
	r, err := New(s, st, Options{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	st.OnCollect(func() { n++; st.Gauge("ratelimit.localcache.entryCount").Set(n) })
	r.Flush()
	if !strings.Contains(out.String(), `"name":"ratelimit.localcache.entryCount","type":"gauge","value":"1.000000"`) {
		t.Fatalf("flush did not send the collected gauge:\n%s", out.String())
	}
	out.Reset()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"name":"ratelimit.localcache.entryCount","type":"gauge","value":"2.000000"`) {
		t.Fatalf("final flush did not collect first:\n%s", out.String())
	}
}
