package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testenv"
)

// stopBackend is one backend of the STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// table: its settings, a way to read a stored counter ("" when missing) and,
// for Redis, the server's command counts.
type stopBackend struct {
	env   map[string]string
	value func(key string) string
	calls func() map[string]int
}

func redisStopBackend(t *testing.T) stopBackend {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client(t)
	return stopBackend{
		env: map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr},
		value: func(key string) string {
			v, _ := c.Get(context.Background(), key).Result()
			return v
		},
		calls: func() map[string]int {
			info, err := c.Info(context.Background(), "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for _, line := range strings.Split(info, "\r\n") {
				name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
				if ok && strings.HasPrefix(line, "cmdstat_") {
					out[name], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				}
			}
			return out
		},
	}
}

func memcacheStopBackend(t *testing.T) stopBackend {
	m := testenv.StartMemcached(t)
	c := memcache.New(m.Addr)
	return stopBackend{
		env: map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": m.Addr},
		value: func(key string) string {
			it, err := c.Get(key)
			if err != nil {
				return ""
			}
			return strings.TrimRight(string(it.Value), " ")
		},
	}
}

// statusLine renders a /json answer as "CODE rem,rem,..." per descriptor.
func statusLine(t *testing.T, body string) string {
	t.Helper()
	var resp struct {
		OverallCode string
		Statuses    []struct {
			Code           string
			LimitRemaining uint32
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	parts := []string{resp.OverallCode}
	for _, s := range resp.Statuses {
		parts = append(parts, fmt.Sprintf("%s/%d", s.Code, s.LimitRemaining))
	}
	return strings.Join(parts, " ")
}

// TestStopIncrementWhenOverLimit pins the reference's answers with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: it reads
// every counter first with GET and increments only the keys that would go
// over; a key left alone reports its stored count. Numbers are the ones the
// reference answered: near=a remaining 8 (not 7) once k=two is over, and
// near=c remaining 10 (not 8) beside an over near=b with hitsAddend 2.
func TestStopIncrementWhenOverLimit(t *testing.T) {
	const (
		pair    = `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]},{"entries":[{"key":"near","value":"a"}]}]}`
		nearB   = `{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"b"}]}]}`
		bAndC   = `{"domain":"probe","hitsAddend":2,"descriptors":[{"entries":[{"key":"near","value":"b"}]},{"entries":[{"key":"near","value":"c"}]}]}`
		twoKey  = "probe_k_two_1795313460"
		nearA   = "probe_near_a_1795313460"
		nearBK  = "probe_near_b_1795313460"
		nearCK  = "probe_near_c_1795313460"
		memory  = "memory"
		redis   = "redis"
		memc    = "memcache"
		cacheOn = "1048576"
	)
	for _, backend := range []string{memory, redis, memc} {
		for _, local := range []string{"0", cacheOn} {
			t.Run(fmt.Sprintf("%s/local_cache=%s", backend, local), func(t *testing.T) {
				var sb stopBackend
				switch backend {
				case redis:
					sb = redisStopBackend(t)
				case memc:
					sb = memcacheStopBackend(t)
				default:
					sb = stopBackend{env: map[string]string{"BACKEND_TYPE": "memory"}}
				}
				env := map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "LOCAL_CACHE_SIZE_IN_BYTES": local}
				for k, v := range sb.env {
					env[k] = v
				}
				h := start(t, env, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
				// settle waits until the backend holds want for key: memcache
				// applies increments after answering, as the reference does.
				settle := func(key, want string) {
					t.Helper()
					if sb.value != nil {
						testenv.Eventually(t, key+" = "+want, func() bool { return sb.value(key) == want })
					}
				}
				send := func(body, want string) {
					t.Helper()
					_, _, got := h.Post(t, "/json", body)
					if line := statusLine(t, got); line != want {
						t.Fatalf("%s: got %s, want %s", body, line, want)
					}
				}
				var before map[string]int
				mark := func() {
					if sb.calls != nil {
						before = sb.calls()
					}
				}
				// commands checks the Redis commands one request sent.
				commands := func(get, incrby, expire int) {
					t.Helper()
					if sb.calls == nil {
						return
					}
					after := sb.calls()
					d := func(c string) int { return after[c] - before[c] }
					if d("get") != get || d("incrby") != incrby || d("expire") != expire {
						t.Errorf("commands GET %d INCRBY %d EXPIRE %d, want %d %d %d", d("get"), d("incrby"), d("expire"), get, incrby, expire)
					}
				}

				mark()
				send(pair, "OK OK/1 OK/9")
				commands(2, 2, 2) // GETs first, then INCRBY+EXPIRE of both
				settle(twoKey, "1")
				settle(nearA, "1")
				send(pair, "OK OK/0 OK/8")
				settle(twoKey, "2")
				settle(nearA, "2")
				mark()
				send(pair, "OVER_LIMIT OVER_LIMIT/0 OK/8")
				// k=two would go over: only it is incremented; near=a is sent
				// with 0 hits and reports the 2 it holds.
				commands(2, 2, 2)
				settle(twoKey, "3")
				settle(nearA, "2")
				mark()
				send(pair, "OVER_LIMIT OVER_LIMIT/0 OK/8")
				if local == cacheOn {
					// k=two answers from the local cache: no GET, near=a INCRBY 0.
					commands(0, 1, 1)
					settle(twoKey, "3")
				} else {
					commands(2, 2, 2)
					settle(twoKey, "4")
				}
				settle(nearA, "2")

				for i := 1; i <= 9; i++ {
					send(nearB, fmt.Sprintf("OK OK/%d", 10-i))
					settle(nearBK, strconv.Itoa(i))
				}
				mark()
				send(bAndC, "OVER_LIMIT OVER_LIMIT/0 OK/10")
				commands(2, 2, 2)
				settle(nearBK, "11")
				settle(nearCK, "0") // INCRBY 0 creates the key, as in the reference

				p := "ratelimit.service.rate_limit.probe."
				// Stats count the full hits, also for keys not incremented (#808).
				if got := h.Stats.CounterValue(p + "near.total_hits"); got != 4+9+2+2 {
					t.Errorf("near total_hits = %d, want 17", got)
				}
				if got := h.Stats.CounterValue(p + "k_two.over_limit"); got != 2 {
					t.Errorf("k_two over_limit = %d, want 2", got)
				}
			})
		}
	}
}

// TestHitsAddendOverInt64: a hits_addend Redis cannot
// add is the caller's error, InvalidArgument, and nothing reaches Redis
// (the reference sends it and stores -1).
func TestHitsAddendOverInt64(t *testing.T) {
	sb := redisStopBackend(t)
	h := start(t, sb.env, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	req := rlsReq("probe", "near", "big")
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	before := sb.calls()
	_, err := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t)).ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "hits_addend 18446744073709551615") {
		t.Fatalf("got %v, want InvalidArgument naming the hits_addend", err)
	}
	after := sb.calls()
	for _, c := range []string{"incrby", "get", "expire"} {
		if after[c] != before[c] {
			t.Errorf("%s sent %d times", c, after[c]-before[c])
		}
	}
	// The largest addend Redis can take is accepted.
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(math.MaxInt64)
	resp, err := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t)).ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("MaxInt64: %v %v", resp, err)
	}
}

// TestServerStatsFamilies: a running server has the
// reference's ratelimit.go.*, ratelimit.redis_pool.*,
// ratelimit.redis_per_second_pool.* and runtime.* statistics.
func TestServerStatsFamilies(t *testing.T) {
	main := testenv.StartRedis(t, testenv.RedisOptions{})
	sec := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr,
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": sec.Addr},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml"), "rl.yaml": readFile(t, "rl.yaml")})
	if code, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"persec"}]},{"entries":[{"key":"k","value":"two"}]}]}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	h.Stats.Collect() // what a flush does first
	for _, scope := range []string{"ratelimit.redis_pool", "ratelimit.redis_per_second_pool"} {
		if v := h.Stats.Gauge(scope + ".cx_active").Value(); v < 1 {
			t.Errorf("%s.cx_active = %d", scope, v)
		}
		if v := h.Stats.CounterValue(scope + ".cx_total"); v < 1 {
			t.Errorf("%s.cx_total = %d", scope, v)
		}
	}
	if v := h.Stats.Gauge("ratelimit.go.numGoroutine").Value(); v < 1 {
		t.Errorf("ratelimit.go.numGoroutine = %d", v)
	}
	if v := h.Stats.CounterValue("ratelimit.go.totalAlloc"); v == 0 {
		t.Error("ratelimit.go.totalAlloc = 0")
	}
	if v := h.Stats.CounterValue("runtime.load_attempts"); v < 1 {
		t.Errorf("runtime.load_attempts = %d", v)
	}
	if v := h.Stats.Gauge("runtime.num_values").Value(); v != 2 {
		t.Errorf("runtime.num_values = %d, want 2 (the files loaded)", v)
	}
}
