package transport_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

func rlsReq(domain string, pairs ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// forEachGRPCServer runs a test against each gRPC server the gRPC port may
// have (SLUICE_GRPC_SERVER): what clients see must not depend on it.
func forEachGRPCServer(t *testing.T, f func(t *testing.T, env map[string]string)) {
	for _, name := range []string{"native", "grpc-go"} {
		t.Run(name, func(t *testing.T) { f(t, map[string]string{"SLUICE_GRPC_SERVER": name}) })
	}
}

// with is env plus one variable.
func with(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range env {
		out[a] = b
	}
	return out
}

func TestGRPCDecisionsAndErrors(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		c := rlsv3.NewRateLimitServiceClient(h.grpcConn(t))
		ctx := context.Background()
		resp, err := c.ShouldRateLimit(ctx, rlsReq("probe", "k", "persec"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 999 ||
			st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.GetDurationUntilReset().AsDuration() != time.Second {
			t.Fatalf("response %v", resp)
		}
		for _, tc := range []struct {
			req  *rlsv3.RateLimitRequest
			code codes.Code
			msg  string
		}{
			{&rlsv3.RateLimitRequest{Domain: "probe"}, codes.InvalidArgument, "rate limit descriptor list must not be empty"},
			{rlsReq("", "k", "two"), codes.InvalidArgument, "rate limit domain must not be empty"},
		} {
			_, err := c.ShouldRateLimit(ctx, tc.req)
			if s, _ := status.FromError(err); s.Code() != tc.code || s.Message() != tc.msg {
				t.Errorf("got %v, want %v %q", err, tc.code, tc.msg)
			}
		}
		if got := h.stats.CounterValue("ratelimit_server.ShouldRateLimit.total_requests"); got != 3 {
			t.Errorf("total_requests = %d, want 3", got)
		}
	})
}

func TestNoConfigIsFailedPrecondition(t *testing.T) {
	h := start(t, map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
		map[string]string{"bad.yaml": "domain: d\nbogus: 1\n"})
	c := rlsv3.NewRateLimitServiceClient(h.grpcConn(t))
	_, err := c.ShouldRateLimit(context.Background(), rlsReq("probe", "k", "two"))
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || s.Message() != "no rate limit configuration loaded" {
		t.Fatalf("gRPC: %v", err)
	}
	status, _, body := h.post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`)
	if status != 503 || body != "no rate limit configuration loaded\n" {
		t.Fatalf("HTTP: %d %q", status, body)
	}
	// With FORCE_START_WITHOUT_INITIAL_CONFIG the listeners may answer before
	// the failed load is counted: wait for the count, not for a schedule.
	testenv.Eventually(t, "the failed load to be counted", func() bool {
		return h.stats.CounterValue("ratelimit.service.config_load_error") > 0
	})
	if got := h.stats.CounterValue("ratelimit.service.config_load_error"); got != 1 {
		t.Errorf("config_load_error = %d", got)
	}
}

func TestGRPCHealth(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		hc := healthpb.NewHealthClient(h.grpcConn(t))
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
		h.srv.Health().Set("sigterm", false)
		if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch after SIGTERM: %v %v", r, err)
		}
		if s, _ := check("ratelimit"); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("after SIGTERM: %v", s)
		}
		if s, _ := check(""); s != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("empty after SIGTERM: %v", s)
		}
		if code, body := h.get(t, h.http+"/healthcheck"); code != 500 || body != "" {
			t.Errorf("/healthcheck after SIGTERM: %d %q", code, body)
		}
	})
}

func TestDebugServer(t *testing.T) {
	h := start(t, nil, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	_, index := h.get(t, h.debug+"/")
	wantIndex := "/debug/pprof/: root of various pprof endpoints. hit for help.\n/debug/pprof/profile: CPU profiling endpoint\n/debug/pprof/trace: trace endpoint\n/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n"
	if index != wantIndex {
		t.Errorf("index:\n%s", index)
	}
	if _, cfg := h.get(t, h.debug+"/rlconfig"); !strings.Contains(cfg, "probe.k_two: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("rlconfig:\n%s", cfg)
	}
	if _, st := h.get(t, h.debug+"/stats"); !strings.Contains(st, "cmdline: [") || !strings.Contains(st, "memstats: {") {
		t.Errorf("stats:\n%.200s", st)
	}
	if code, _ := h.get(t, h.debug+"/debug/pprof/"); code != 200 {
		t.Errorf("pprof: %d", code)
	}
	// As the reference, any other path is the index.
	for _, p := range []string{"/nope", "/rlconfig/x", "/stats2"} {
		if code, body := h.get(t, h.debug+p); code != 200 || body != wantIndex {
			t.Errorf("%s: %d %q, want the index", p, code, body)
		}
	}
}

// TestDebugEmptyRlconfig: with no configuration /rlconfig is an empty 200
// without a Content-Type, as the reference's (sniffed from an empty body).
func TestDebugEmptyRlconfig(t *testing.T) {
	h := start(t, nil, nil)
	resp, err := http.Get(h.debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Type") != "" {
		t.Fatalf("%d %q Content-Type %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

// TestReloadDirectoryMode: with RUNTIME_WATCH_ROOT=false, writes, creates
// and removes in the config directory reload every file; a bad file keeps
// the previous config.
func TestReloadDirectoryMode(t *testing.T) {
	h := start(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, map[string]string{"a.yaml": "domain: a\n"})
	dump := func() string { return h.srv.DumpConfig() }
	// Each version of a file appears whole (written beside the directory,
	// then renamed in), as a deploy tool writes it: a watcher that reads a
	// half-written file would count a load error this test does not expect.
	write := func(name, body string) {
		tmp := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(h.cfgDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	healthy := func() bool { code, _ := h.get(t, h.http+"/healthcheck"); return code == 200 }
	if !healthy() {
		t.Fatal("not healthy with a domain loaded")
	}
	write("b.yaml", "domain: b\ndescriptors:\n  - {key: x, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	testenv.Eventually(t, "create reload", func() bool { return strings.Contains(dump(), "b.x:") })
	successes := h.stats.CounterValue("ratelimit.service.config_load_success")

	write("b.yaml", "domain: b\ndescriptors:\n  - {key: x, rate_limit: {unit: lightyear}}\n")
	testenv.Eventually(t, "bad reload", func() bool { return h.stats.CounterValue("ratelimit.service.config_load_error") == 1 })
	if !strings.Contains(dump(), "b.x:") {
		t.Fatal("previous config not kept after a bad reload")
	}
	if !strings.Contains(h.logs.String(), "Error loading new configuration: b.yaml: invalid rate limit unit 'lightyear'") {
		t.Errorf("log lacks the load error:\n%s", h.logs.String())
	}

	write("b.yaml", "domain: b\ndescriptors:\n  - {key: y, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	testenv.Eventually(t, "write reload", func() bool { return strings.Contains(dump(), "b.y:") })
	if h.stats.CounterValue("ratelimit.service.config_load_success") <= successes {
		t.Error("config_load_success did not grow")
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.Remove(filepath.Join(h.cfgDir, f)); err != nil {
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
	if !strings.Contains(h.srv.DumpConfig(), "one.a:") {
		t.Fatalf("initial: %q", h.srv.DumpConfig())
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
	testenv.Eventually(t, "symlink swap reload", func() bool { return strings.Contains(h.srv.DumpConfig(), "two.b:") })
	if strings.Contains(h.srv.DumpConfig(), "one.a:") {
		t.Fatal("old domain still loaded")
	}
	// The file names are the reference's: config.<file>.
	if !strings.Contains(h.logs.String(), "Successfully loaded new configuration") {
		t.Error("no success log")
	}
}

func TestConfigNamesAreTheReferences(t *testing.T) {
	h := start(t, nil, map[string]string{"a.yaml": "domain: d\n", "b.yaml": "domain: d\n"})
	_ = h
	if !strings.Contains(h.logs.String(), "Error loading new configuration: b.yaml: duplicate domain 'd' in config file") {
		t.Fatalf("logs:\n%s", h.logs.String())
	}
}

func TestHealthTransitionsWithRequiredConfig(t *testing.T) {
	// Startup with a bad file: unhealthy; fix it: healthy.
	h := start(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, map[string]string{"a.yaml": "domain: [\n"})
	if code, _ := h.get(t, h.http+"/healthcheck"); code != 500 {
		t.Fatalf("bad initial config: %d", code)
	}
	if err := os.WriteFile(filepath.Join(h.cfgDir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "healthy after fix", func() bool { code, _ := h.get(t, h.http+"/healthcheck"); return code == 200 })
}

func TestGracefulStopAnswersInFlight(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		c := rlsv3.NewRateLimitServiceClient(h.grpcConn(t))
		var wg sync.WaitGroup
		var ok, failed atomic.Int64
		stop := make(chan struct{})
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for n := 0; n < 2000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := c.ShouldRateLimit(context.Background(), rlsReq("probe", "near", fmt.Sprint(i, n)))
					if err != nil {
						failed.Add(1)
						return // the server went away: expected once it stops
					}
					ok.Add(1)
				}
			}(i)
		}
		testenv.Eventually(t, "traffic", func() bool { return ok.Load() > 100 })
		h.stop(t)
		close(stop)
		wg.Wait()
		// Calls end either answered or refused at the connection; none hang.
		if ok.Load() == 0 {
			t.Fatal("no call succeeded")
		}
	})
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

func TestGRPCOnUnixSocket(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		sock := filepath.Join(t.TempDir(), "rls.sock")
		h := start(t, with(srv, "GRPC_UDS", sock), map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		if h.srv.Addrs().GRPC.Network() != "unix" {
			t.Fatalf("gRPC listens on %v", h.srv.Addrs().GRPC)
		}
		h.grpc = "unix://" + sock
		c := rlsv3.NewRateLimitServiceClient(h.grpcConn(t))
		resp, err := c.ShouldRateLimit(context.Background(), rlsReq("probe", "k", "two"))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v %v", resp, err)
		}
	})
}

// TestCallsTogetherKeepTheirOwnAnswers: calls a connection carries at once
// (the native server decides those read together as one batch) are each
// answered as if alone: bad requests get their own status, the others are
// counted exactly, and every call counts in the server's statistics.
func TestCallsTogetherKeepTheirOwnAnswers(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		t.Run("memory", func(t *testing.T) { callsTogether(t, srv) })
		t.Run("redis", func(t *testing.T) {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			callsTogether(t, with(with(with(srv, "BACKEND_TYPE", "redis"), "REDIS_SOCKET_TYPE", "tcp"), "REDIS_URL", r.Addr))
		})
	})
}

func callsTogether(t *testing.T, env map[string]string) {
	h := start(t, env, exactRules(10)) // a limit of 1,000
	c := rlsv3.NewRateLimitServiceClient(h.grpcConn(t))
	const callers, rounds = 40, 50
	var ok, over, bad atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				req := rlsReq("x", "k", "0")
				if (i+n)%7 == 0 {
					req = rlsReq("", "k", "0")
				}
				resp, err := c.ShouldRateLimit(context.Background(), req)
				switch {
				case req.Domain == "":
					if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || s.Message() != "rate limit domain must not be empty" {
						t.Errorf("a bad request got %v", err)
					}
					bad.Add(1)
				case err != nil:
					t.Error(err)
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				default:
					over.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	good := int64(callers*rounds) - bad.Load()
	if want := min(good, 1000); ok.Load() != want || over.Load() != good-want {
		t.Errorf("%d OK and %d over of %d, want %d OK", ok.Load(), over.Load(), good, want)
	}
	if got := h.stats.CounterValue("ratelimit_server.ShouldRateLimit.total_requests"); got != callers*rounds {
		t.Errorf("total_requests = %d, want %d", got, callers*rounds)
	}
	if got := h.stats.CounterValue("ratelimit.service.call.should_rate_limit.service_error"); got != uint64(bad.Load()) {
		t.Errorf("service_error = %d, want %d", got, bad.Load())
	}
}
