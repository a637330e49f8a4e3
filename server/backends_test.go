package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRedisKeysAndTTLsAreTheReferences: the keys and TTLs sluice writes for
// the reference's documented examples (compat §2.5, §4.3), read back from
// Redis itself rather than from sluice's key function.
func TestRedisKeysAndTTLsAreTheReferences(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "CACHE_KEY_PREFIX": "pfx:"},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml"), "rl.yaml": readFile(t, "rl.yaml")})
	for _, body := range []string{
		`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":""}]}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"day"}]}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"persec"}]}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"zzz","value":"w"}],"limit":{"requestsPerUnit":7,"unit":7}}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"wild","value":"prefix1"}]}]}`,
		`{"domain":"rl","descriptors":[{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"override"}]}]}`,
		`{"domain":"probe","descriptors":[{"entries":[{"key":"free","value":"x"}]}]}`,
	} {
		if code, _, resp := h.Post(t, "/json", body); code != 200 {
			t.Fatalf("%s: %d %s", body, code, resp)
		}
	}
	c := r.Client(t)
	ctx := context.Background()
	want := map[string]time.Duration{
		"pfx:probe_k_two_1795313460":                                          60 * time.Second,
		"pfx:probe_near__1795313460":                                          60 * time.Second,
		"pfx:probe_k_day_1795305600":                                          86400 * time.Second,
		"pfx:probe_k_persec_1795313464":                                       time.Second,
		"pfx:probe_zzz_w_1795046400":                                          604800 * time.Second,
		"pfx:probe_wild_prefix1_1795313460":                                   60 * time.Second,
		"pfx:rl_source_cluster_proxy_destination_cluster_override_1795313460": 60 * time.Second,
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(want) {
		t.Errorf("redis holds %d keys %v, want %d (the unlimited rule must not write one)", len(keys), keys, len(want))
	}
	for key, ttl := range want {
		if ttl == time.Second {
			continue // may have expired already; its presence is checked below
		}
		if v, err := c.Get(ctx, key).Result(); err != nil || v != "1" {
			t.Errorf("%s = %q (%v), want 1", key, v, err)
		}
		if got, err := c.TTL(ctx, key).Result(); err != nil || got > ttl || got < ttl-5*time.Second {
			t.Errorf("%s TTL %v (%v), want %v", key, got, err, ttl)
		}
	}
	if n, _ := c.Exists(ctx, "pfx:probe_k_persec_1795313464").Result(); n != 1 {
		t.Errorf("per-second key missing (TTL 1 s; the test is slower than that only on a broken machine)")
	}
}

// TestPerSecondRedis: with REDIS_PERSECOND, SECOND rules live only on the second instance.
func TestPerSecondRedis(t *testing.T) {
	main := testenv.StartRedis(t, testenv.RedisOptions{})
	sec := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr,
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "KVSTORE_PERSECOND_URL": sec.Addr},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	code, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"persec"}]},{"entries":[{"key":"k","value":"two"}]}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	ctx := context.Background()
	mk, _ := main.Client(t).Keys(ctx, "*").Result()
	sk, _ := sec.Client(t).Keys(ctx, "*").Result()
	if len(mk) != 1 || mk[0] != "probe_k_two_1795313460" {
		t.Errorf("main instance keys %v", mk)
	}
	if len(sk) > 1 || (len(sk) == 1 && sk[0] != "probe_k_persec_1795313464") {
		t.Errorf("per-second instance keys %v", sk)
	}
}

// exactness runs the 20,000-on-10,000 check through the gRPC ports of
// servers that share their counters, decision i on server i % len(hs).
func exactness(t *testing.T, keys int, hs ...*harness) {
	t.Helper()
	const total, limit = 20000, 10000
	var clients []rlsv3.RateLimitServiceClient
	for _, h := range hs {
		clients = append(clients, rlsv3.NewRateLimitServiceClient(h.GRPCConn(t)))
	}
	okPerKey := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	var failed atomic.Int64
	for i := 0; i < total; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			k := i % keys
			resp, err := clients[i%len(clients)].ShouldRateLimit(context.Background(), rlsReq("x", "k", fmt.Sprint(k)))
			if err != nil {
				if failed.Add(1) == 1 {
					t.Error(err)
				}
				return
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				okPerKey[k].Add(1)
			}
		}(i)
	}
	wg.Wait()
	for k := range okPerKey {
		if got := okPerKey[k].Load(); got != int64(limit/keys) {
			t.Fatalf("key %d: %d OK, want exactly %d", k, got, limit/keys)
		}
	}
}

// TestExactnessOnRedis: the exactness promise holds on every Redis topology.
func TestExactnessOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several Redis topologies")
	}
	topologies := []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"single", func(t *testing.T) map[string]string {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr}
		}},
		{"sentinel", func(t *testing.T) map[string]string {
			g := testenv.StartSentinelGroup(t, testenv.RedisOptions{})
			return map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": g.MasterName + "," + strings.Join(g.Sentinels, ",")}
		}},
		{"cluster", func(t *testing.T) map[string]string {
			c := testenv.StartRedisCluster(t, 3)
			return map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": strings.Join(c.Addrs, ",")}
		}},
	}
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			env := tp.env(t)
			env["BACKEND_TYPE"] = "redis"
			// Counts are the point here, not latency: under -race on a shared
			// machine a decision may wait longer than the default second.
			env["SLUICE_BACKEND_TIMEOUT"] = "30s"
			for _, keys := range []int{1, 1000} {
				env["CACHE_KEY_PREFIX"] = fmt.Sprintf("run%d:", keys) // each round its own counters
				h := start(t, env, exactRules(keys))
				exactness(t, keys, h)
				h.Stop(t)
			}
		})
	}
}

// TestExactnessAcrossReplicas: replicas sharing one Redis, or one Redis
// Cluster, hand out exactly the limit between them: 20,000 concurrent
// decisions on a limit of 10,000 spread over the replicas give 10,000 OK.
func TestExactnessAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and a Redis Cluster")
	}
	for _, tc := range []struct {
		name     string
		replicas int
		env      func(t *testing.T) map[string]string
	}{
		{"2 replicas, one redis", 2, func(t *testing.T) map[string]string {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr}
		}},
		{"3 replicas, 3-primary cluster", 3, func(t *testing.T) map[string]string {
			c := testenv.StartRedisCluster(t, 3)
			return map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": strings.Join(c.Addrs, ",")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			env["BACKEND_TYPE"] = "redis"
			env["SLUICE_BACKEND_TIMEOUT"] = "30s" // as in TestExactnessOnRedis
			for _, keys := range []int{1, 1000} {
				env["CACHE_KEY_PREFIX"] = fmt.Sprintf("run%d:", keys)
				var hs []*harness
				for i := 0; i < tc.replicas; i++ {
					hs = append(hs, start(t, env, exactRules(keys)))
				}
				exactness(t, keys, hs...)
				for _, h := range hs {
					h.Stop(t)
				}
			}
		})
	}
}

func TestMemcacheBackend(t *testing.T) {
	a := testenv.StartMemcached(t)
	b := testenv.StartMemcached(t)
	h := start(t, map[string]string{"BACKEND_TYPE": "memcache", "MCSTORE_HOST_PORT": a.Addr + "," + b.Addr},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	const two = `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`
	// Increments are applied in the background: wait for each to land in
	// memcached (not for a lucky 50 ms) so the sequence is deterministic.
	mc := gomemcache.New(a.Addr, b.Addr) // the backend's server order, so the same node per key
	key := fmt.Sprintf("probe_k_two_%d", t0.Unix()/60*60)
	for i, want := range []int{200, 200, 429} {
		if code, _, body := h.Post(t, "/json", two); code != want {
			t.Fatalf("request %d: %d %s", i+1, code, body)
		}
		testenv.Eventually(t, fmt.Sprintf("increment %d in memcached", i+1), func() bool {
			it, err := mc.Get(key)
			return err == nil && string(it.Value) == fmt.Sprint(i+1)
		})
	}
	if code, _ := h.Get(t, h.HTTP+"/healthcheck"); code != 200 {
		t.Errorf("memcache health %d: sluice's must follow reality, unlike the reference", code)
	}
	// A key over 250 bytes fails that request, clearly, and is counted.
	long := strings.Repeat("v", 260)
	code, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"`+long+`"}]}]}`)
	if code != 400 || body != "Bad Request\n" || !strings.Contains(h.Logs.String(), "250-byte limit") {
		t.Errorf("long key: %d %q", code, body)
	}
	code, _, body = h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"a b"}]}]}`)
	// (Its log line is folded into the repeat count of the first one: one
	// warning per interval, see internal/ratelog.)
	if code != 400 || body != "Bad Request\n" {
		t.Errorf("key with a space: %d %q", code, body)
	}
	if got := h.Stats.CounterValue("ratelimit.service.call.should_rate_limit.service_error"); got != 2 {
		t.Errorf("service_error = %d", got)
	}
	// Both nodes hold keys once enough distinct keys are written.
	for i := 0; i < 50; i++ {
		h.Post(t, "/json", fmt.Sprintf(`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"v%d"}]}]}`, i))
	}
	a.Kill()
	testenv.Eventually(t, "unhealthy with a node down", func() bool { code, _ := h.Get(t, h.HTTP+"/healthcheck"); return code == 500 })
	a.Restart(t)
	testenv.Eventually(t, "healthy again", func() bool { code, _ := h.Get(t, h.HTTP+"/healthcheck"); return code == 200 })
}

// TestBackendDownAndBack: with Redis gone every request is answered within
// the bound, Unavailable / 503, unlimited and unmatched still OK; when Redis
// returns, decisions resume without a restart.
func TestBackendDownAndBack(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "SLUICE_BACKEND_TIMEOUT": "300ms", "REDIS_TIMEOUT": "200ms",
		"SLUICE_LOG_REPEAT_INTERVAL": "1h"},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
	ctx := context.Background()
	if _, err := c.ShouldRateLimit(ctx, rlsReq("probe", "near", "a")); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	var wg sync.WaitGroup
	var slow, wrong atomic.Int64
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start := time.Now()
			_, err := c.ShouldRateLimit(ctx, rlsReq("probe", "near", fmt.Sprint(i)))
			if time.Since(start) > 3*time.Second {
				slow.Add(1)
			}
			if s, _ := status.FromError(err); s.Code() != codes.Unavailable {
				wrong.Add(1)
				t.Logf("answer: %v", err)
			}
		}(i)
	}
	wg.Wait()
	if slow.Load() > 0 || wrong.Load() > 0 {
		t.Fatalf("%d answers took over 3s, %d were not Unavailable", slow.Load(), wrong.Load())
	}
	if code, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"a"}]}]}`); code != 503 {
		t.Errorf("HTTP with redis down: %d %q", code, body)
	}
	if code, _, _ := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"free","value":"a"}]},{"entries":[{"key":"zzz","value":"a"}]}]}`); code != 200 {
		t.Errorf("unlimited+unmatched with redis down: %d", code)
	}
	if got := h.Stats.CounterValue("ratelimit.service.call.should_rate_limit.redis_error"); got == 0 {
		t.Error("redis_error not counted")
	}
	// 41 failed decisions, one WARN line: the rest are counted for the
	// interval's report, not logged one by one.
	if n := strings.Count(h.Logs.String(), `level=WARN msg="error: `); n != 1 {
		t.Errorf("%d WARN lines for 41 failed decisions, want 1:\n%s", n, h.Logs.String())
	}
	r.Restart(t)
	testenv.Eventually(t, "decisions to resume", func() bool {
		_, err := c.ShouldRateLimit(ctx, rlsReq("probe", "near", "back"))
		return err == nil
	})
}

func TestRedisStartupWaitsForTheServer(t *testing.T) {
	// No listener may open before Redis answers: with nothing on the port,
	// NewServer keeps retrying until its context ends, and says why.
	settings, err := settingsFor(map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1",
		"REDIS_STARTUP_INITIAL_INTERVAL": "10ms", "REDIS_STARTUP_MAX_INTERVAL": "20ms", "REDIS_STARTUP_MAX_ELAPSED_TIME": "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newServer(settings)
	if err == nil || !strings.Contains(err.Error(), "timed out waiting for Redis connection to 127.0.0.1:1") {
		t.Fatalf("got %v", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("should be the startup timeout, not a cancel")
	}
}

// TestLocalCacheSparesRedis: once a key is over its limit, further requests
// in the window are refused from the local cache and Redis is not touched
// (observed on the reference: Redis stayed at 3 while 3 more got 429).
func TestLocalCacheSparesRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	const two = `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`
	for i, want := range []int{200, 200, 429, 429, 429, 429} {
		if code, _, _ := h.Post(t, "/json", two); code != want {
			t.Fatalf("request %d: %d, want %d", i+1, code, want)
		}
	}
	if v, err := r.Client(t).Get(context.Background(), "probe_k_two_1795313460").Result(); err != nil || v != "3" {
		t.Fatalf("redis count %q (%v), want 3", v, err)
	}
	p := "ratelimit.service.rate_limit.probe.k_two."
	if got := h.Stats.CounterValue(p + "over_limit_with_local_cache"); got != 3 {
		t.Errorf("over_limit_with_local_cache = %d", got)
	}
	if got := h.Stats.CounterValue(p + "over_limit"); got != 4 {
		t.Errorf("over_limit = %d", got)
	}
}

// Liveness and readiness part: with Redis down, /healthcheck (readiness,
// the reference's) turns 500 and /livez (liveness) stays 200, so the
// manifests' liveness probe restarts no replica for a Redis outage.
func TestLivenessIgnoresRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr,
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true", "REDIS_TIMEOUT": "200ms"},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	if code, _ := h.Get(t, h.HTTP+"/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck with Redis up: %d", code)
	}
	r.Kill()
	testenv.Eventually(t, "/healthcheck to follow Redis down", func() bool {
		code, _ := h.Get(t, h.HTTP+"/healthcheck")
		return code == 500
	})
	if code, body := h.Get(t, h.HTTP+"/livez"); code != 200 || body != "OK" {
		t.Fatalf("/livez with Redis down: %d %q, want 200 OK", code, body)
	}
}
