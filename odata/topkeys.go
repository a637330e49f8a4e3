package odata

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"sync"
)

// topKeysTracked is how many keys the costliest-key summary holds; what it
// reports of them is its top.
const topKeysTracked = 256

// keyCost is what a key's requests that did database work cost.
type keyCost struct {
	Requests int64   `json:"requests"`
	Rows     int64   `json:"rows"`
	Bytes    int64   `json:"bytes"`
	Cost     int64   `json:"filter_cost"`
	Seconds  float64 `json:"seconds"`
	// Error bounds the overcount of Seconds: the weight of the key this
	// one replaced (the space-saving summary's guarantee).
	Error float64 `json:"error_seconds,omitempty"`
}

// topKeys is a space-saving summary (Metwally, Agrawal, El Abbadi) of the
// time keys' requests took, first to last byte: at most max keys are
// held, a new key replaces the one with the least time and inherits it as
// its error bound, so any key whose true time exceeds total/max is held,
// and memory does not grow with the number of keys.
type topKeys struct {
	max int

	mu sync.Mutex
	m  map[string]*keyCost
}

func newTopKeys(max int) *topKeys { return &topKeys{max: max, m: make(map[string]*keyCost, max)} }

func (t *topKeys) add(key string, c keyCost) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[key]
	if e == nil {
		if len(t.m) >= t.max {
			var minKey string
			var min *keyCost
			for k, v := range t.m {
				if min == nil || v.Seconds < min.Seconds {
					minKey, min = k, v
				}
			}
			delete(t.m, minKey)
			e = &keyCost{Seconds: min.Seconds, Error: min.Seconds}
		} else {
			e = &keyCost{}
		}
		t.m[key] = e
	}
	e.Requests += c.Requests
	e.Rows += c.Rows
	e.Bytes += c.Bytes
	e.Cost += c.Cost
	e.Seconds += c.Seconds
}

// TopKey is one row of the costliest-key summary.
type TopKey struct {
	Key string `json:"key"`
	keyCost
}

// top returns the n keys with the most time, most first.
func (t *topKeys) top(n int) []TopKey {
	t.mu.Lock()
	out := make([]TopKey, 0, len(t.m))
	for k, v := range t.m {
		out = append(out, TopKey{Key: k, keyCost: *v})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seconds != out[j].Seconds {
			return out[i].Seconds > out[j].Seconds
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// TopKeys returns the n keys (at most 256) whose requests that did
// database work took the most time since the start, with their requests,
// rows, bytes and filter cost. Keys are named by key id ("key:<id>") or
// browser caller ("origin:<origin>@<address>"), never by secret.
func (m *Metrics) TopKeys(n int) []TopKey { return m.top.top(n) }

// TopKeysHandler serves TopKeys as JSON, for the debug port; ?n= sets how
// many (default 20).
func (m *Metrics) TopKeysHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				http.Error(w, "n must be a positive number", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m.TopKeys(n))
	})
}
