package main

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The pull metrics port (USE_PROMETHEUS) caps its connections as every
// other port does: a flood of twice the open-file limit is refused with
// 503 and Retry-After beyond the default cap (2 % of the limit), the rate
// limit ports go on answering throughout, and a scrape is served once the
// flood is gone. The port had no cap: the flood took every descriptor.
func TestMetricsPortCapRefusesPolitely(t *testing.T) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
	c := startFDChild(t, map[string]string{"DISABLE_STATS": "false", "USE_STATSD": "false",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": metrics})
	scrape := func() error {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + metrics + "/metrics")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			t.Fatalf("scrape: %s", resp.Status)
		}
		return err
	}
	if err := scrape(); err != nil {
		t.Fatalf("scrape before the flood: %v", err)
	}
	conns, release := flood(t, metrics, 2*fdLimit)
	refused := refusedHTTP(conns)
	if refused == 0 {
		t.Fatalf("none of %d connections to the metrics port was refused with 503", len(conns))
	}
	if err := c.answers2(); err != nil {
		t.Fatalf("the rate limit port under a metrics-port flood: %v\n%s", err, c.proc.LogTail(20))
	}
	release()
	var last error
	testenv.EventuallyWithin(t, 30*time.Second, "a scrape after the flood", func() bool {
		last = scrape()
		return last == nil || c.proc.Exited()
	})
	if c.proc.Exited() {
		t.Fatalf("sluice serve exited (%v):\n%s", last, c.proc.LogTail(20))
	}
	t.Logf("metrics port: %d of %d connections refused 503 (limit %d open files); /healthcheck answered throughout", refused, len(conns), fdLimit)
}
