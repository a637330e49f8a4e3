package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/internal/testenv"
)

// While Redis holds every write (CLIENT PAUSE), the first decision's call is
// in flight (one call per shard: SLUICE_MAX_IN_FLIGHT=1) and the ones sent
// after it queue at the shard: the pull metrics show them
// as sluice_shard_queue_depth, and the gauge falls back to 0 once Redis
// answers again.
func TestShardQueueDepthMetric(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	h := start(t, map[string]string{
		"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "SLUICE_SHARDS": "1", "SLUICE_MAX_IN_FLIGHT": "1",
		"SLUICE_BACKEND_TIMEOUT": "20s", "USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0",
	}, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	url := "http://" + h.Srv.MetricsAddr().String() + "/metrics"
	depth := func() float64 {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		mf := mfs["sluice_shard_queue_depth"]
		if mf == nil || len(mf.Metric) != 1 || len(mf.Metric[0].Label) != 1 || mf.Metric[0].Label[0].GetValue() != "0" {
			t.Fatalf("want one sluice_shard_queue_depth{shard=\"0\"}, got %v", mf)
		}
		return mf.Metric[0].GetGauge().GetValue()
	}
	if d := depth(); d != 0 {
		t.Fatalf("idle queue depth %v", d)
	}

	admin := r.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		}
	}
	defer unpause()

	c := rlsv3.NewRateLimitServiceClient(h.GRPCConn(t))
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	send := func(i int) {
		defer wg.Done()
		_, err := c.ShouldRateLimit(ctx, rlsReq("probe", "near", fmt.Sprint(i)))
		errs <- err
	}
	// The first decision's call blocks in Redis; every later one waits in
	// the shard's queue behind it. (Sent together, they could be read as
	// one batch and leave in one call.)
	wg.Add(1)
	go send(0)
	testenv.Eventually(t, "the first call blocked in Redis", func() bool {
		info, err := admin.Info(ctx, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(info, "blocked_clients:1\r\n")
	})
	for i := 1; i < n; i++ {
		wg.Add(1)
		go send(i)
	}
	testenv.Eventually(t, fmt.Sprintf("queue depth %d", n-1), func() bool { return depth() == n-1 })
	unpause()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("decision after the pause: %v", err)
		}
	}
	if d := depth(); d != 0 {
		t.Errorf("queue depth after the pause %v, want 0", d)
	}
}
