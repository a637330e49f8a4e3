// Package memengine is test support: a rules engine counting directly on
// an in-memory store, as the tests of the quota service and of its
// transport build it (rules, store, engine and statistics, closed with
// the test). No package imports it but tests.
package memengine

import (
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
)

// Rules1000 is one rule of 1,000 a second per user in domain q.
const Rules1000 = "domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"

// Engine is what New built.
type Engine struct {
	Stats   *stats.Store
	Store   *memory.Backend
	Service *engine.Service
	// Counter counts on Store directly (the engine's own).
	Counter engine.Counter
}

// New is an engine with rules loaded, counting on a memory store made
// with o (its clock is the engine's too), both reporting to one
// statistics store; the store is closed when the test ends.
func New(t testing.TB, rules string, o memory.Options) Engine {
	t.Helper()
	st := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(rules)}}, engine.ConfigOptions{Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.NewWithOptions(o)
	t.Cleanup(func() { _ = store.Close() })
	eo := engine.DefaultOptions()
	eo.Counter, eo.Stats = engine.DirectCounter{Backend: store}, st
	if o.Clock != nil {
		eo.Clock = o.Clock
	}
	eng, err := engine.NewService(eo)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetConfig(cfg)
	return Engine{Stats: st, Store: store, Service: eng, Counter: eo.Counter}
}
