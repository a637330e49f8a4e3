package server_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/settings"
)

// pipeRules limit every value of m per minute (main store) and of s per
// second (the per-second store with REDIS_PERSECOND).
var pipeRules = map[string]string{"pipe.yaml": "domain: pipe\ndescriptors:\n" +
	"  - {key: m, rate_limit: {unit: minute, requests_per_unit: 1000}}\n" +
	"  - {key: s, rate_limit: {unit: second, requests_per_unit: 1000}}\n"}

// pipeBody is one /json request with the given numbers of main (m) and
// per-second (s) descriptors, each its own key.
func pipeBody(tag string, main, perSecond int) string {
	var ds []string
	for i := 0; i < main; i++ {
		ds = append(ds, fmt.Sprintf(`{"entries":[{"key":"m","value":"%s%d"}]}`, tag, i))
	}
	for i := 0; i < perSecond; i++ {
		ds = append(ds, fmt.Sprintf(`{"entries":[{"key":"s","value":"%s%d"}]}`, tag, i))
	}
	return `{"domain":"pipe","descriptors":[` + strings.Join(ds, ",") + `]}`
}

// serverCounts reads INCRBY calls and read events from a Redis server. Every
// pipeline arrives as one read event, so reads tell how many were sent.
func serverCounts(t *testing.T, c *goredis.Client) (incrby, reads int) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_incrby:calls="); ok {
			incrby, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			reads, _ = strconv.Atoi(v)
		}
	}
	return incrby, reads
}

// pipeStores starts a main and a per-second Redis and a server using both,
// one shard and one connection per store with one call at a time, so every
// batch of a lane is one pipeline on one connection.
func pipeStores(t *testing.T, env map[string]string) (h *harness, main, perSecond *goredis.Client) {
	t.Helper()
	m := testenv.StartRedis(t, testenv.RedisOptions{})
	s := testenv.StartRedis(t, testenv.RedisOptions{})
	vars := map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": m.Addr, "REDIS_POOL_SIZE": "1",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": s.Addr, "REDIS_PERSECOND_POOL_SIZE": "1",
		"SLUICE_SHARDS": "1", "SLUICE_MAX_IN_FLIGHT": "1"}
	for k, v := range env {
		vars[k] = v
	}
	h = start(t, vars, pipeRules)
	main, perSecond = m.Client(t), s.Client(t)
	for _, c := range []*goredis.Client{main, perSecond} {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return h, main, perSecond
}

// TestPipelineLimitPerStore: REDIS_PIPELINE_LIMIT and
// REDIS_PERSECOND_PIPELINE_LIMIT (commands, two per key) each bound the
// pipelines of their own store, counted on the servers themselves.
func TestPipelineLimitPerStore(t *testing.T) {
	for _, tc := range []struct {
		mainLimit, secLimit string
		mainKeys, secKeys   int
		wantMain, wantSec   int // pipelines each server reads
	}{
		{"1", "1", 3, 3, 3, 3}, // a limit below one key's two commands still sends one key
		{"0", "0", 23, 5, 1, 1},
		{"10", "0", 23, 5, 5, 1}, // 5 keys (10 commands) per pipeline
		{"11", "4", 23, 5, 5, 3}, // an odd limit rounds down to whole keys
		{"2", "46", 3, 23, 3, 1},
		{"46", "2", 23, 3, 1, 3},
	} {
		t.Run(fmt.Sprintf("limits=%s,%s", tc.mainLimit, tc.secLimit), func(t *testing.T) {
			h, main, sec := pipeStores(t, map[string]string{"REDIS_PIPELINE_LIMIT": tc.mainLimit, "REDIS_PERSECOND_PIPELINE_LIMIT": tc.secLimit})
			// One decision first: every connection exists before counting,
			// so no handshake read is in the figures.
			if code, _, body := h.Post(t, "/json", pipeBody("warm", 1, 1)); code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			mi0, mr0 := serverCounts(t, main)
			si0, sr0 := serverCounts(t, sec)
			if code, _, body := h.Post(t, "/json", pipeBody("k", tc.mainKeys, tc.secKeys)); code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			mi1, mr1 := serverCounts(t, main)
			si1, sr1 := serverCounts(t, sec)
			// The second INFO's own read is in the second figure.
			if got := mr1 - mr0 - 1; got != tc.wantMain {
				t.Errorf("main store read %d pipelines, want %d", got, tc.wantMain)
			}
			if got := sr1 - sr0 - 1; got != tc.wantSec {
				t.Errorf("per-second store read %d pipelines, want %d", got, tc.wantSec)
			}
			if mi1-mi0 != tc.mainKeys || si1-si0 != tc.secKeys {
				t.Errorf("INCRBY calls main %d, per-second %d; want %d, %d", mi1-mi0, si1-si0, tc.mainKeys, tc.secKeys)
			}
		})
	}
}

// TestPipelineWindowPerStore: REDIS_PIPELINE_WINDOW and
// REDIS_PERSECOND_PIPELINE_WINDOW each hold only their own store's batches.
// A window of an hour holds a batch for longer than the test lives, so a held
// decision fails at SLUICE_BACKEND_TIMEOUT with its key never written; a full
// batch (the pipeline limit reached) leaves at once whatever the window.
func TestPipelineWindowPerStore(t *testing.T) {
	for _, tc := range []struct {
		name              string
		env               map[string]string
		mainHeld, secHeld bool
	}{
		{"per-second window", map[string]string{"REDIS_PERSECOND_PIPELINE_WINDOW": "1h"}, false, true},
		{"main window", map[string]string{"REDIS_PIPELINE_WINDOW": "1h"}, true, false},
		{"limit 1 fills a batch at one key", map[string]string{"REDIS_PIPELINE_WINDOW": "1h", "REDIS_PIPELINE_LIMIT": "1",
			"REDIS_PERSECOND_PIPELINE_WINDOW": "1h", "REDIS_PERSECOND_PIPELINE_LIMIT": "1"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"SLUICE_BACKEND_TIMEOUT": "300ms"}
			for k, v := range tc.env {
				env[k] = v
			}
			h, main, sec := pipeStores(t, env)
			for _, lane := range []struct {
				name      string
				body, key string
				c         *goredis.Client
				held      bool
			}{
				{"main", pipeBody("w", 1, 0), "pipe_m_w0_1795313460", main, tc.mainHeld},
				{"per-second", pipeBody("w", 0, 1), "pipe_s_w0_1795313464", sec, tc.secHeld},
			} {
				code, _, body := h.Post(t, "/json", lane.body)
				n, err := lane.c.Exists(context.Background(), lane.key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if lane.held && (code == 200 || n != 0) {
					t.Errorf("%s: held by its window, yet answered %d %s and key written: %v", lane.name, code, body, n != 0)
				}
				if !lane.held && (code != 200 || n != 1) {
					t.Errorf("%s: not held, yet answered %d %s and key written: %v", lane.name, code, body, n != 0)
				}
			}
		})
	}
}

// TestPipelineSettings: the pipeline variables are read once, per store, in
// keys (two commands per key, at least one key under any positive limit).
func TestPipelineSettings(t *testing.T) {
	for _, tc := range []struct {
		env               map[string]string
		mainKeys, secKeys int
		mainWin, secWin   time.Duration
		err               string
	}{
		{env: nil},
		{env: map[string]string{"REDIS_PIPELINE_LIMIT": "1"}, mainKeys: 1},
		{env: map[string]string{"REDIS_PIPELINE_LIMIT": "2", "REDIS_PERSECOND_PIPELINE_LIMIT": "11"}, mainKeys: 1, secKeys: 5},
		{env: map[string]string{"KVSTORE_PIPELINE_WINDOW": "2ms", "REDIS_PERSECOND_PIPELINE_WINDOW": "7ms"}, mainWin: 2 * time.Millisecond, secWin: 7 * time.Millisecond},
		{env: map[string]string{"REDIS_PIPELINE_LIMIT": "-2"}, err: "REDIS_PIPELINE_LIMIT must not be negative"},
		{env: map[string]string{"REDIS_PERSECOND_PIPELINE_LIMIT": "-1"}, err: "REDIS_PERSECOND_PIPELINE_LIMIT must not be negative"},
		{env: map[string]string{"REDIS_PERSECOND_PIPELINE_WINDOW": "-1s"}, err: "REDIS_PERSECOND_PIPELINE_WINDOW must not be negative"},
	} {
		s, err := settings.FromEnv(settings.FromMap(tc.env))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: got %v, want %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		m, p := s.Backend.Redis.Pipeline, s.Backend.RedisPerSecond.Pipeline
		if m.MaxKeys != tc.mainKeys || p.MaxKeys != tc.secKeys || m.Window != tc.mainWin || p.Window != tc.secWin {
			t.Errorf("%v: main %+v, per-second %+v", tc.env, m, p)
		}
	}
}
