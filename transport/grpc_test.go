package transport_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestGRPCDecisionsAndErrors(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
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
		if got := h.Stats.CounterValue("ratelimit_server.ShouldRateLimit.total_requests"); got != 3 {
			t.Errorf("total_requests = %d, want 3", got)
		}
	})
}

func TestNoConfigIsFailedPrecondition(t *testing.T) {
	h := start(t, map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
		map[string]string{"bad.yaml": "domain: d\nbogus: 1\n"})
	c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
	_, err := c.ShouldRateLimit(context.Background(), rlsReq("probe", "k", "two"))
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || s.Message() != "no rate limit configuration loaded" {
		t.Fatalf("gRPC: %v", err)
	}
	status, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`)
	if status != 503 || body != "no rate limit configuration loaded\n" {
		t.Fatalf("HTTP: %d %q", status, body)
	}
	// With FORCE_START_WITHOUT_INITIAL_CONFIG the listeners may answer before
	// the failed load is counted: wait for the count, not for a schedule.
	testenv.Eventually(t, "the failed load to be counted", func() bool {
		return h.Stats.CounterValue("ratelimit.service.config_load_error") > 0
	})
	if got := h.Stats.CounterValue("ratelimit.service.config_load_error"); got != 1 {
		t.Errorf("config_load_error = %d", got)
	}
}

func TestDebugServer(t *testing.T) {
	h := start(t, nil, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	_, index := h.Get(t, h.Debug+"/")
	wantIndex := "/debug/pprof/: root of various pprof endpoints. hit for help.\n/debug/pprof/profile: CPU profiling endpoint\n/debug/pprof/trace: trace endpoint\n/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n"
	if index != wantIndex {
		t.Errorf("index:\n%s", index)
	}
	if _, cfg := h.Get(t, h.Debug+"/rlconfig"); !strings.Contains(cfg, "probe.k_two: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("rlconfig:\n%s", cfg)
	}
	if _, st := h.Get(t, h.Debug+"/stats"); !strings.Contains(st, "cmdline: [") || !strings.Contains(st, "memstats: {") {
		t.Errorf("stats:\n%.200s", st)
	}
	if code, _ := h.Get(t, h.Debug+"/debug/pprof/"); code != 200 {
		t.Errorf("pprof: %d", code)
	}
	// As the reference, any other path is the index.
	for _, p := range []string{"/nope", "/rlconfig/x", "/stats2"} {
		if code, body := h.Get(t, h.Debug+p); code != 200 || body != wantIndex {
			t.Errorf("%s: %d %q, want the index", p, code, body)
		}
	}
}

// TestDebugEmptyRlconfig: with no configuration /rlconfig is an empty 200
// without a Content-Type, as the reference's (sniffed from an empty body).
func TestDebugEmptyRlconfig(t *testing.T) {
	h := start(t, nil, nil)
	resp, err := http.Get(h.Debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Type") != "" {
		t.Fatalf("%d %q Content-Type %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

func TestGracefulStopAnswersInFlight(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
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
		h.Stop(t)
		close(stop)
		wg.Wait()
		// Calls end either answered or refused at the connection; none hang.
		if ok.Load() == 0 {
			t.Fatal("no call succeeded")
		}
	})
}

func TestGRPCOnUnixSocket(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		sock := filepath.Join(t.TempDir(), "rls.sock")
		h := start(t, with(srv, "GRPC_UDS", sock), map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		if h.Srv.Addrs().GRPC.Network() != "unix" {
			t.Fatalf("gRPC listens on %v", h.Srv.Addrs().GRPC)
		}
		h.GRPC = "unix://" + sock
		c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
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
	c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
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
	if got := h.Stats.CounterValue("ratelimit_server.ShouldRateLimit.total_requests"); got != callers*rounds {
		t.Errorf("total_requests = %d, want %d", got, callers*rounds)
	}
	if got := h.Stats.CounterValue("ratelimit.service.call.should_rate_limit.service_error"); got != uint64(bad.Load()) {
		t.Errorf("service_error = %d, want %d", got, bad.Load())
	}
}
