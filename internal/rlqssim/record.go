package rlqssim

import (
	"fmt"
	"time"
)

// PerSecond is one wall-clock second's requests: the unix second
// [Second, Second+1), the windows sluice's per-second limits count in.
type PerSecond struct {
	Second  int64
	Allowed uint64
	Denied  uint64
}

// Admitted is the fleet's requests into bucket per second, from the
// second Run started in to the last one with a request.
func (s *Sim) Admitted(bucket int) []PerSecond {
	var out []PerSecond
	for i := range s.envoys {
		out = addSeconds(out, s.AdmittedBy(i, bucket))
	}
	return out
}

func addSeconds(into, from []PerSecond) []PerSecond {
	for i, p := range from {
		if i == len(into) {
			into = append(into, PerSecond{Second: p.Second})
		}
		into[i].Allowed += p.Allowed
		into[i].Denied += p.Denied
	}
	return into
}

// AdmittedBy is Envoy envoy's requests into bucket per second (nil for an
// Envoy or bucket that does not exist).
func (s *Sim) AdmittedBy(envoy, bucket int) []PerSecond {
	if envoy < 0 || envoy >= len(s.envoys) || bucket < 0 || bucket >= len(s.cfg.Buckets) {
		return nil
	}
	first := s.firstSecond()
	e := s.envoys[envoy]
	e.mu.Lock()
	defer e.mu.Unlock()
	row := e.perSecond[bucket]
	out := make([]PerSecond, len(row))
	for i, c := range row {
		out[i] = PerSecond{Second: first + int64(i), Allowed: uint64(c.allowed), Denied: uint64(c.denied)}
	}
	return out
}

func (s *Sim) firstSecond() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// Totals are Envoy envoy's requests into bucket so far.
func (s *Sim) Totals(envoy, bucket int) (allowed, denied uint64) {
	if envoy < 0 || envoy >= len(s.envoys) || bucket < 0 || bucket >= len(s.cfg.Buckets) {
		return 0, 0
	}
	e := s.envoys[envoy]
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total[bucket].allowed, e.total[bucket].denied
}

// Received is the log of bucket actions Envoy envoy got, oldest first
// (bounded by Config.MaxReceived).
func (s *Sim) Received(envoy int) []Received {
	if envoy < 0 || envoy >= len(s.envoys) {
		return nil
	}
	e := s.envoys[envoy]
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Received(nil), e.received...)
}

// Bucket is what Envoy envoy's filter holds for bucket now.
func (s *Sim) Bucket(envoy, bucket int) BucketView {
	if envoy < 0 || envoy >= len(s.envoys) {
		return BucketView{}
	}
	e := s.envoys[envoy]
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.f.view(bucket, time.Now())
}

// Check judges the run's bucket c.Bucket against c (see Criteria), with
// the fair shares computed from Config.Demand. Call it after Run.
func (s *Sim) Check(c Criteria) (Verdict, error) {
	if c.Bucket < 0 || c.Bucket >= len(s.cfg.Buckets) {
		return Verdict{}, fmt.Errorf("rlqssim: no bucket %d", c.Bucket)
	}
	if c.Limit <= 0 || c.MinFleet < 0 || c.MinFleet > 1 || c.MinShare < 0 || c.MinShare > 1 || c.Settle < 0 {
		return Verdict{}, fmt.Errorf("rlqssim: criteria out of range: %+v", c)
	}
	s.mu.Lock()
	start, end, first := s.start, s.end, s.first
	s.mu.Unlock()
	if start.IsZero() {
		return Verdict{}, fmt.Errorf("rlqssim: Check before Run")
	}
	admitted := make([][]uint64, len(s.envoys))
	for e := range s.envoys {
		for _, p := range s.AdmittedBy(e, c.Bucket) {
			admitted[e] = append(admitted[e], p.Allowed)
		}
	}
	demand := func(e int, t time.Duration) float64 { return s.cfg.Demand(e, c.Bucket, t) }
	return judge(c, start, end, first, admitted, demand), nil
}
