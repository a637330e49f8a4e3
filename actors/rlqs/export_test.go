package rlqs

import (
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
)

// NewManual is a service without its loop: the caller serves the hubs
// with Tick, on a clock of its own, so that a benchmark measures the work
// of a given number of ticks rather than what a ticker did meanwhile.
func NewManual(o Options, rules Rules, counter engine.Counter, st *stats.Store) (*Service, error) {
	s, err := newService(o, rules, counter, st)
	if err != nil {
		return nil, err
	}
	close(s.done) // no loop for Close to wait for
	return s, nil
}

// Tick is one turn of the service's loop at now.
func (s *Service) Tick(now time.Time) { s.tick(now) }

// EnvoyEqual and Distinct are envoyEqual and distinct, for tests.
var EnvoyEqual, Distinct = envoyEqual, distinct
