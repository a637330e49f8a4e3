package rlqssim

import (
	"fmt"
	"testing"
	"time"
)

// TestScenarios runs the rows in simulated time against the quota
// service itself: every client, no_assignment_behavior, arrival pattern
// and transport (with and without delivery acknowledgements).
func TestScenarios(t *testing.T) {
	t.Parallel()
	for _, client := range []Client{Global, PerWorker} {
		for _, na := range []Strategy{{Kind: AllowAll}, {Kind: DenyAll}} {
			for _, sc := range Scenarios(client, na) {
				for _, arr := range []Arrivals{Even, Poisson} {
					for _, acks := range []bool{true, false} {
						name := fmt.Sprintf("%s/%s/%s/%s/acks=%v", client, na.Kind, sc.Name, arr, acks)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							run, err := Simulate(sc.VConfig(arr, acks, 1))
							if err != nil {
								t.Fatal(err)
							}
							c := sc.Criteria(arr)
							var rls []uint64
							if len(run.RLS) > 0 {
								rls = run.RLS[0]
							}
							v := Judge(c, run.Admitted[0], rls, sc.RLSDemand(), func(e int, at time.Duration) float64 { return sc.Demand(e, 0, at) }, sc.FaultTimes())
							t.Log(Summary(name, v, run.Lapses))
							if v.Over > 0 || run.Lapses > 0 || len(v.Failures) > 0 {
								t.Errorf("never over, never lapsing, use and fairness above the floors: %v %v", v.Failures, run.LapseLog)
							}
						})
					}
				}
			}
		}
	}
}
