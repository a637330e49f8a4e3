package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

const leaseRules = `domain: ls
descriptors:
  - key: k
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k
    value: sliding
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: k
    value: bucket
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket}
  - key: k
    value: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: k
    value: exact
    rate_limit: {unit: minute, requests_per_unit: 3, counting: exact}
  - key: k
    value: big
    rate_limit: {unit: minute, requests_per_unit: 100000}
`

// TestLeaseCountsAsExact: on Redis, lease counting answers every decision
// and counts every statistic as exact counting does (the clock stands
// still, so the windows are the same), answers most decisions without a
// store call, shows rules' counting in /rlconfig, and gives back what it
// reserved and did not use when it stops: the store then holds exactly
// the admitted hits.
func TestLeaseCountsAsExact(t *testing.T) {
	type outcome struct {
		codes []int
		stats map[string]uint64
	}
	values := []string{"fixed", "sliding", "bucket", "shadow", "exact"}
	clk := testenv.NewClock(t0)
	run := func(counting string) (outcome, *harness, *testenv.Redis) {
		r := testenv.StartRedis(t, testenv.RedisOptions{})
		h := startClock(t, map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr,
			"SLUICE_COUNTING": counting, "NEAR_LIMIT_RATIO": "0.5",
			// The decision, reservation and give-back bound: a loaded
			// machine can hold a call past the 1 s default, which would
			// fail a decision or leave a give-back undone (the store would
			// still hold what was reserved ahead). Counts are under test.
			"SLUICE_BACKEND_TIMEOUT": "2m"}, map[string]string{"ls.yaml": leaseRules}, clk.Now)
		var out outcome
		for _, v := range values {
			for i := 0; i < 8; i++ {
				hits := ""
				if i == 4 {
					hits = `,"hitsAddend":2`
				}
				body := fmt.Sprintf(`{"domain":"ls"%s,"descriptors":[{"entries":[{"key":"k","value":%q}]}]}`, hits, v)
				code, _, resp := h.Post(t, "/json", body)
				if code != 200 && code != 429 {
					t.Fatalf("%s %s: %d %s", counting, body, code, resp)
				}
				out.codes = append(out.codes, code)
			}
		}
		out.stats = map[string]uint64{}
		for _, v := range values {
			p := "ratelimit.service.rate_limit.ls.k_" + v + "."
			for _, s := range []string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"} {
				out.stats[v+"."+s] = h.Stats.CounterValue(p + s)
			}
		}
		return out, h, r
	}
	exact, _, _ := run("exact")
	leased, h, r := run("lease")
	if fmt.Sprint(exact.codes) != fmt.Sprint(leased.codes) {
		t.Errorf("codes:\nexact %v\nlease %v", exact.codes, leased.codes)
	}
	for k, v := range exact.stats {
		if leased.stats[k] != v {
			t.Errorf("%s: lease %d, exact %d", k, leased.stats[k], v)
		}
	}
	local := h.Stats.CounterValue("ratelimit.lease.local_decisions")
	waited := h.Stats.CounterValue("ratelimit.lease.waited_decisions")
	if local+waited != 4*8 || local == 0 {
		t.Errorf("lease answered %d locally and %d after waiting, want 32 in all, most locally", local, waited)
	}
	if _, dump := h.Get(t, h.Debug+"/rlconfig"); !strings.Contains(dump, "ls.k_exact: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false, counting: exact") {
		t.Errorf("/rlconfig does not show the rule's counting:\n%s", dump)
	}
	// A key's rate needs time between its decisions: 10 ms apart, so that
	// from the third on the lease reserves ahead (a cold key's first
	// reservations are the hits asked).
	for i := 0; i < 10; i++ {
		clk.Add(10 * time.Millisecond)
		if code, _, resp := h.Post(t, "/json", `{"domain":"ls","descriptors":[{"entries":[{"key":"k","value":"big"}]}]}`); code != 200 {
			t.Fatalf("big %d: %d %s", i, code, resp)
		}
	}
	c := r.Client(t)
	held, err := c.Get(context.Background(), "ls_k_big_1795313460").Int()
	if err != nil || held <= 10 {
		t.Fatalf("before stop the store holds %d (%v): the lease should have reserved ahead of 10 decisions", held, err)
	}
	h.Stop(t)
	// What was admitted stays counted; what was reserved beyond it went back.
	if v, err := c.Get(context.Background(), "ls_k_big_1795313460").Result(); err != nil || v != "10" {
		t.Errorf("after stop: %q (%v), want 10", v, err)
	}
	if got := h.Stats.CounterValue("ratelimit.lease.returned_hits"); got != uint64(held-10) {
		t.Errorf("returned_hits %d, want %d", got, held-10)
	}
}
