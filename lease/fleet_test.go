package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/lease"
)

// replica is one sluice: a Service whose counter is a lease.Counter over
// next (the shared store), or next itself in exact mode.
type replica struct {
	svc   *engine.Service
	lease *lease.Counter
}

// fleet starts one replica per mode ("lease" or "exact") on the store
// behind next, all with the rules in yaml.
func fleet(t *testing.T, yaml string, next func() engine.Counter, now func() time.Time, modes ...string) []replica {
	t.Helper()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(yaml)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []replica
	for _, m := range modes {
		o := engine.DefaultOptions()
		o.Clock = now
		o.Counter = next()
		// 20,000 decisions on one key under -race on a busy 2-core machine
		// can take many seconds to drain (the 1 s default failed them, and
		// 5 s did on a loaded machine); no count changes.
		o.Timeout = callTimeout
		r := replica{}
		if m == "lease" {
			o.Counting = engine.CountLease
			lc, err := lease.New(o.Counter, lease.Options{Clock: now, CallTimeout: callTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lc.Close() })
			o.Counter, r.lease = lc, lc
		}
		if r.svc, err = engine.NewService(o); err != nil {
			t.Fatal(err)
		}
		r.svc.SetConfig(cfg)
		out = append(out, r)
	}
	return out
}

func request(key string) *engine.Request {
	return &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k", Value: key}}}}}
}

// storm sends n decisions on key at once, spread over the replicas by
// share (weights), and returns how many were OK on each.
func storm(t *testing.T, rs []replica, key string, n int, share []int) []int {
	t.Helper()
	total := 0
	for _, s := range share {
		total += s
	}
	ok := make([]atomic.Int64, len(rs))
	var wg sync.WaitGroup
	var errs atomic.Int64
	var first atomic.Value
	sent := 0
	for i := range rs {
		m := n * share[i] / total
		if i == len(rs)-1 {
			m = n - sent
		}
		sent += m
		for range m {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := rs[i].svc.ShouldRateLimit(context.Background(), request(key))
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					return
				}
				if resp.OverallCode == engine.CodeOK {
					ok[i].Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if e := errs.Load(); e > 0 {
		t.Fatalf("%d decisions failed, first: %v", e, first.Load())
	}
	out := make([]int, len(rs))
	for i := range ok {
		out[i] = int(ok[i].Load())
	}
	return out
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

const rulesYAML = `domain: d
descriptors:
  - key: k
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 10000}
  - key: k
    value: sliding
    rate_limit: {unit: minute, requests_per_unit: 10000, algorithm: sliding_window}
  - key: k
    value: bucket
    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: token_bucket}
`
