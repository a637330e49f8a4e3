package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestGRPCHealth(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		hc := healthpb.NewHealthClient(h.GRPCConn(t))
		check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
			return r.GetStatus(), status.Code(err)
		}
		if s, c := check("ratelimit"); s != healthpb.HealthCheckResponse_SERVING || c != codes.OK {
			t.Errorf("ratelimit: %v %v", s, c)
		}
		if s, c := check(""); s != healthpb.HealthCheckResponse_SERVING || c != codes.OK {
			t.Errorf("empty: %v %v", s, c)
		}
		if _, c := check("other"); c != codes.NotFound {
			t.Errorf("other: %v", c)
		}
		watch, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watch: %v %v", r, err)
		}
		// Shutting down flips health first.
		h.Srv.SetHealth("sigterm", false)
		if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch after SIGTERM: %v %v", r, err)
		}
		if s, _ := check("ratelimit"); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("after SIGTERM: %v", s)
		}
		if s, _ := check(""); s != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("empty after SIGTERM: %v", s)
		}
		if code, body := h.Get(t, h.HTTP+"/healthcheck"); code != 500 || body != "" {
			t.Errorf("/healthcheck after SIGTERM: %d %q", code, body)
		}
	})
}

// TestReloadDirectoryMode: with RUNTIME_WATCH_ROOT=false, writes, creates
// and removes in the config directory reload every file; a bad file keeps
// the previous config.
func TestReloadDirectoryMode(t *testing.T) {
	h := start(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, map[string]string{"a.yaml": "domain: a\n"})
	dump := func() string { return h.Srv.DumpConfig() }
	// Each version of a file appears whole (written beside the directory,
	// then renamed in), as a deploy tool writes it: a watcher that reads a
	// half-written file would count a load error this test does not expect.
	write := func(name, body string) {
		tmp := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(h.CfgDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	healthy := func() bool { code, _ := h.Get(t, h.HTTP+"/healthcheck"); return code == 200 }
	if !healthy() {
		t.Fatal("not healthy with a domain loaded")
	}
	write("b.yaml", "domain: b\ndescriptors:\n  - {key: x, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	testenv.Eventually(t, "create reload", func() bool { return strings.Contains(dump(), "b.x:") })
	successes := h.Stats.CounterValue("ratelimit.service.config_load_success")

	write("b.yaml", "domain: b\ndescriptors:\n  - {key: x, rate_limit: {unit: lightyear}}\n")
	testenv.Eventually(t, "bad reload", func() bool { return h.Stats.CounterValue("ratelimit.service.config_load_error") == 1 })
	if !strings.Contains(dump(), "b.x:") {
		t.Fatal("previous config not kept after a bad reload")
	}
	if !strings.Contains(h.Logs.String(), "Error loading new configuration: b.yaml: invalid rate limit unit 'lightyear'") {
		t.Errorf("log lacks the load error:\n%s", h.Logs.String())
	}

	write("b.yaml", "domain: b\ndescriptors:\n  - {key: y, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	testenv.Eventually(t, "write reload", func() bool { return strings.Contains(dump(), "b.y:") })
	if h.Stats.CounterValue("ratelimit.service.config_load_success") <= successes {
		t.Error("config_load_success did not grow")
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.Remove(filepath.Join(h.CfgDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "remove reload", func() bool { return dump() == "" })
	testenv.Eventually(t, "unhealthy without domains", func() bool { return !healthy() })
}

// TestReloadSymlinkSwap: with RUNTIME_WATCH_ROOT=true the root is a symlink
// swapped atomically, and only files under <subdir>/config are rules.
func TestReloadSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	mk := func(version, body string) string {
		dir := filepath.Join(base, version)
		if err := os.MkdirAll(filepath.Join(dir, "app", "config"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "app", "config", "r.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		// Not a rule: outside config/.
		if err := os.WriteFile(filepath.Join(dir, "app", "notes.txt"), []byte("not yaml: ["), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	v1 := mk("v1", "domain: one\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	v2 := mk("v2", "domain: two\ndescriptors:\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	current := filepath.Join(base, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	h := start(t, map[string]string{"RUNTIME_ROOT": current, "RUNTIME_WATCH_ROOT": "true", "RUNTIME_SUBDIRECTORY": "app"}, nil)
	if !strings.Contains(h.Srv.DumpConfig(), "one.a:") {
		t.Fatalf("initial: %q", h.Srv.DumpConfig())
	}
	// Writing inside the old tree is not a reload trigger in this mode.
	// Swap atomically: new link, then rename over the old one.
	tmp := filepath.Join(base, "current.tmp")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "symlink swap reload", func() bool { return strings.Contains(h.Srv.DumpConfig(), "two.b:") })
	if strings.Contains(h.Srv.DumpConfig(), "one.a:") {
		t.Fatal("old domain still loaded")
	}
	// The file names are the reference's: config.<file>.
	if !strings.Contains(h.Logs.String(), "Successfully loaded new configuration") {
		t.Error("no success log")
	}
}

func TestConfigNamesAreTheReferences(t *testing.T) {
	h := start(t, nil, map[string]string{"a.yaml": "domain: d\n", "b.yaml": "domain: d\n"})
	_ = h
	if !strings.Contains(h.Logs.String(), "Error loading new configuration: b.yaml: duplicate domain 'd' in config file") {
		t.Fatalf("logs:\n%s", h.Logs.String())
	}
}

func TestHealthTransitionsWithRequiredConfig(t *testing.T) {
	// Startup with a bad file: unhealthy; fix it: healthy.
	h := start(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, map[string]string{"a.yaml": "domain: [\n"})
	if code, _ := h.Get(t, h.HTTP+"/healthcheck"); code != 500 {
		t.Fatalf("bad initial config: %d", code)
	}
	if err := os.WriteFile(filepath.Join(h.CfgDir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "healthy after fix", func() bool { code, _ := h.Get(t, h.HTTP+"/healthcheck"); return code == 200 })
}

// TestExactness: 20,000 concurrent decisions on one key with a limit of
// 10,000 give exactly 10,000 OK; with 1,000 keys the same holds per key.
// Through the engine and the shard actors of a real server (memory backend;
// TestExactnessOnRedis runs the same on Redis).
func TestExactness(t *testing.T) {
	for _, keys := range []int{1, 1000} {
		t.Run(fmt.Sprint(keys, " keys"), func(t *testing.T) {
			forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
				exactness(t, keys, start(t, srv, exactRules(keys)))
			})
		})
	}
}
