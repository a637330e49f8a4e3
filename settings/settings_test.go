package settings_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

func TestSettingsDefaults(t *testing.T) {
	s, err := settings.FromEnv(settings.FromMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.Listen.GRPCAddr() != "0.0.0.0:8081" || s.Listen.HTTPAddr() != "0.0.0.0:8080" || s.Listen.DebugAddr() != "0.0.0.0:6070" {
		t.Errorf("addresses %s %s %s", s.Listen.GRPCAddr(), s.Listen.HTTPAddr(), s.Listen.DebugAddr())
	}
	if s.Config.RuntimeRoot != "/srv/runtime_data/current" || !s.Config.WatchRoot || s.Config.AppDirectory != "config" || s.Config.Type != "FILE" {
		t.Errorf("config %+v", s.Config)
	}
	if s.Limiter.ExpirationJitterMax != 300*time.Second || s.Limiter.NearLimitRatio != 0.8 || s.Backend.Type != "redis" {
		t.Errorf("limiter %+v backend %+v", s.Limiter, s.Backend)
	}
	if s.Limiter.Headers.Limit != "RateLimit-Limit" || s.Listen.MaxConnectionAge != 24*time.Hour {
		t.Errorf("headers %+v", s.Limiter.Headers)
	}
}

// TestGCHeapFloorSetting: on by default, off when the operator set GOGC
// (their GC policy stands), and SLUICE_GC_HEAP_FLOOR_MIB wins over both.
func TestGCHeapFloorSetting(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{nil, settings.DefaultGCHeapFloorMiB},
		{map[string]string{"GOGC": "200"}, 0},
		{map[string]string{"GOGC": "200", "SLUICE_GC_HEAP_FLOOR_MIB": "128"}, 128},
		{map[string]string{"SLUICE_GC_HEAP_FLOOR_MIB": "0"}, 0},
	} {
		s, err := settings.FromEnv(settings.FromMap(tc.env))
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if s.Runtime.GCHeapFloorMiB != tc.want {
			t.Errorf("%v: floor %d MiB, want %d", tc.env, s.Runtime.GCHeapFloorMiB, tc.want)
		}
	}
}

func TestSettingsErrors(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, "Invalid setting for ConfigType: CONSUL"},
		{map[string]string{"BACKEND_TYPE": "etcd"}, "Invalid setting for BackendType: etcd"},
		{map[string]string{"PORT": "http"}, `PORT="http" is not an integer`},
		{map[string]string{"SHADOW_MODE": "yes please"}, `SHADOW_MODE="yes please" is not a boolean`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, `GRPC_MAX_CONNECTION_AGE="forever" is not a duration`},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}, "NEAR_LIMIT_RATIO must be between 0 and 1"},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL "loud" is not a level`},
		{map[string]string{"REDIS_URL": "a:1", "KVSTORE_URL": "b:2"}, `REDIS_URL="a:1" and KVSTORE_URL="b:2" are both set and differ`},
		{map[string]string{"SLUICE_GC_HEAP_FLOOR_MIB": "-1"}, "SLUICE_GC_HEAP_FLOOR_MIB (-1) must be between 0 (off) and 1048576"},
		{map[string]string{"SLUICE_GC_HEAP_FLOOR_MIB": "67108864"}, "SLUICE_GC_HEAP_FLOOR_MIB (67108864) must be between 0 (off) and 1048576"},
		{map[string]string{"SLUICE_COUNTING": "leased"}, `SLUICE_COUNTING must be exact or lease, got "leased"`},
		{map[string]string{"SLUICE_LEASE_HORIZON": "-1s"}, "SLUICE_LEASE_*: lease: horizon (-1s)"},
		{map[string]string{"SLUICE_RLQS_SPARE": "2"}, "SLUICE_RLQS_*: rlqs: spare 2 must be a fraction in [0, 1]"},
		{map[string]string{"SLUICE_RLQS_MIN_TTL": "500ms"}, "SLUICE_RLQS_*: rlqs: minimum TTL 500ms must be at least 1s"},
		{map[string]string{"SLUICE_RLQS_NO_MATCH": "maybe"}, `SLUICE_RLQS_NO_MATCH: rlqs: no-match behaviour "maybe"`},
		{map[string]string{"SLUICE_RLQS_KEY_ORDER": "api"}, `SLUICE_RLQS_KEY_ORDER: "api" is not domain=key1,key2`},
		{map[string]string{"SLUICE_RLQS_MAX_BUCKETS": "0"}, "SLUICE_RLQS_*: rlqs: max buckets per stream 0 must be at least 1"},
		{map[string]string{"SLUICE_RLQS_REPORT_PERIOD": "10ms"}, "SLUICE_RLQS_*: rlqs: report period 10ms must be at least 100ms"},
		{map[string]string{"SLUICE_RLQS_REFUSED": "sometimes"}, `SLUICE_RLQS_REFUSED: rlqs: refused-bucket behaviour "sometimes"`},
		{map[string]string{"SLUICE_RLQS_SHARDS": "2000"}, "SLUICE_RLQS_*: rlqs: 2000 shards, want 0 (one per CPU) to 1024"},
		{map[string]string{"SLUICE_RLQS_MAX_REPORTERS": "-1"}, "SLUICE_RLQS_*: rlqs: max reporters -1 must be at least 1"},
	}
	for _, tc := range cases {
		_, err := settings.FromEnv(settings.FromMap(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.env, err, tc.want)
		}
	}
}

// TestQuotaSettings: SLUICE_RLQS_* reach the quota service's options.
func TestQuotaSettings(t *testing.T) {
	s, err := settings.FromEnv(settings.FromMap(map[string]string{
		"SLUICE_RLQS_NO_MATCH": "deny_all", "SLUICE_RLQS_KEY_ORDER": "api=path, method;web=user",
		"SLUICE_RLQS_SPARE": "0.25", "SLUICE_RLQS_REPORT_PERIOD": "2s", "SLUICE_RLQS_IDLE": "1m",
		"SLUICE_RLQS_REFUSED": "allow_all", "SLUICE_RLQS_MAX_REPORTERS": "500", "SLUICE_RLQS_SHARDS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	q := s.Limiter.Quota
	got := fmt.Sprintf("%v %v %v %v %v %v %v %v", q.Alloc.NoMatch, q.Alloc.KeyOrder, q.Alloc.Spare, q.Alloc.ReportPeriod, q.IdleAfter,
		q.Refused, q.MaxReporters, q.Shards)
	if want := "deny_all map[api:[path method] web:[user]] 0.25 2s 1m0s allow_all 500 3"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestEnvAliases(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		name string
		want string
	}{
		{map[string]string{"KVSTORE_URL": "x:1"}, "REDIS_URL", "x:1"},
		{map[string]string{"REDIS_URL": "x:1", "KVSTORE_URL": "x:1"}, "REDIS_URL", "x:1"},
		{map[string]string{"MCSTORE_HOST_PORT": "m:1"}, "MEMCACHE_HOST_PORT", "m:1"},
		{map[string]string{"USE_PULLMETRICS": "true"}, "USE_PROMETHEUS", "true"},
		{map[string]string{"PULLMETRICS_ADDR": ":1"}, "PROMETHEUS_ADDR", ":1"},
		{map[string]string{"USE_TAGGED_STATSD": "true"}, "USE_DOG_STATSD", "true"},
		{map[string]string{"TAGGED_STATSD_MOGRIFIERS": "a"}, "USE_DOG_STATSD_MOGRIFIERS", "a"},
		{map[string]string{"TAGGED_STATSD_MOGRIFIERS_A_PATTERN": "p"}, "DOG_STATSD_MOGRIFIER_A_PATTERN", "p"},
	} {
		if got, err := settings.ReadForTest(tc.env, tc.name); got != tc.want || err != nil {
			t.Errorf("%v: %s = %q (%v), want %q", tc.env, tc.name, got, err, tc.want)
		}
	}
}

func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := server.NewLogger(&buf, settings.LogSettings{Level: "debug", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("hello")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["@message"] != "hello" || line["level"] != "warning" || line["@timestamp"] == nil {
		t.Errorf("json line %v", line)
	}
	buf.Reset()
	log, _ = server.NewLogger(&buf, settings.LogSettings{Level: "warn", Format: "text"})
	log.Info("hidden")
	log.Error("shown")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `level=error msg=shown`) || !strings.HasPrefix(got, "time=") {
		t.Errorf("text log %q", got)
	}
}

// TestNearLimitRatioRejected: a ratio that is not a number in [0, 1] fails
// FromEnv with one error that names the variable (the engine's check,
// made once: NaN must not pass the settings and fail only in NewServer).
func TestNearLimitRatioRejected(t *testing.T) {
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "-0.1", "1.01"} {
		_, err := settings.FromEnv(settings.FromMap(map[string]string{"NEAR_LIMIT_RATIO": v}))
		if err == nil {
			t.Errorf("NEAR_LIMIT_RATIO=%s accepted", v)
			continue
		}
		if msg := err.Error(); strings.Count(msg, "NEAR_LIMIT_RATIO must be between 0 and 1") != 1 || strings.Contains(msg, "\n") {
			t.Errorf("NEAR_LIMIT_RATIO=%s: want one error naming the variable, got %q", v, msg)
		}
	}
	for _, v := range []string{"0", "0.5", "1"} {
		if _, err := settings.FromEnv(settings.FromMap(map[string]string{"NEAR_LIMIT_RATIO": v})); err != nil {
			t.Errorf("NEAR_LIMIT_RATIO=%s: %v", v, err)
		}
	}
}
