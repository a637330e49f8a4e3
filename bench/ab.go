package main

import (
	"debug/buildinfo"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
)

// abRow is one workload of an A/B (-compare): sluice's figures divided by
// the compared binary's, round by round, and the median of those ratios.
// A ratio of two runs seconds apart cancels most of a throttled machine's
// drift, which the ratio of two medians (the main table's rows) does not:
// there, rounds that ran slow for both can pick different medians.
type abRow struct {
	backend  string
	w        workload
	rate     float64 // decisions/s, sluice ÷ compared (median of rounds)
	cpu      float64 // server CPU per decision, sluice ÷ compared
	rounds   int
	compared string
}

// pairedRatios pairs each "sluice" target with the -compare target of the
// same backend and returns their per-round ratios' medians.
func pairedRatios(targets []target, samples [][][]row) []abRow {
	var out []abRow
	for i, a := range targets {
		if a.system != "sluice" {
			continue
		}
		for j, b := range targets {
			if !strings.HasPrefix(b.system, "sluice@") || b.backend != a.backend {
				continue
			}
			for k := range samples[i] {
				if r, ok := pairRounds(samples[i][k], samples[j][k]); ok {
					r.backend, r.compared = a.backend, b.system
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// pairRounds is the ratio of round r of a to round r of b, median over the
// rounds both measured.
func pairRounds(a, b []row) (abRow, bool) {
	var rates, cpus []float64
	for r := range min(len(a), len(b)) {
		if ra, rb := a[r].res.rate(), b[r].res.rate(); ra > 0 && rb > 0 {
			rates = append(rates, ra/rb)
		}
		if a[r].cpuMs > 0 && b[r].cpuMs > 0 {
			cpus = append(cpus, a[r].cpuMs/b[r].cpuMs)
		}
	}
	if len(rates) == 0 {
		return abRow{}, false
	}
	r := abRow{w: a[0].w, rate: medianFloat(rates), rounds: len(rates)}
	if len(cpus) > 0 {
		r.cpu = medianFloat(cpus)
	}
	return r, true
}

// renderAB is the A/B table, with the geometric mean over its rows.
// warning is said above the table (buildDifference).
func renderAB(rows []abRow, warning string) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### A/B: sluice ÷ %s\n\n", rows[0].compared)
	if warning != "" {
		fmt.Fprintf(&b, "**%s**\n\n", warning)
	}
	b.WriteString("Each ratio is the median over the rounds of sluice's figure divided by the compared binary's in the same round (above 1: sluice decides more, or spends more CPU per decision).\n\n")
	b.WriteString("| backend | workload | rounds | decisions/s ratio | CPU/decision ratio |\n|---|---|---:|---:|---:|\n")
	var lr, lc float64
	nc := 0
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %s |\n", r.backend, r.w, r.rounds, r.rate, num(r.cpu, 3))
		lr += math.Log(r.rate)
		if r.cpu > 0 {
			lc += math.Log(r.cpu)
			nc++
		}
	}
	cpu := "-"
	if nc > 0 {
		cpu = fmt.Sprintf("%.3f", math.Exp(lc/float64(nc)))
	}
	fmt.Fprintf(&b, "| all | geometric mean of %d rows | | **%.3f** | **%s** |\n\n", len(rows), math.Exp(lr/float64(len(rows))), cpu)
	return b.String()
}

// comparedSettings are the build settings that change the code a binary
// runs: an A/B of two binaries that differ in one measures the setting too
// (a cgo build against CGO_ENABLED=0 read 0.84 where like builds read 0.9).
var comparedSettings = []string{"CGO_ENABLED", "GOAMD64", "GOARCH", "-race", "-gcflags", "-tags", "-trimpath", "-pgo"}

// abWarning is buildDifference for -sluice and -compare, if comparing.
func abWarning(f flags) string {
	if f.compare == "" {
		return ""
	}
	return buildDifference(f.sluice, f.compare)
}

// buildDifference says how the two binaries' builds differ in
// comparedSettings, or "" when they do not (or a build cannot be read).
func buildDifference(a, b string) string {
	ia, errA := buildinfo.ReadFile(a)
	ib, errB := buildinfo.ReadFile(b)
	if errA != nil || errB != nil {
		return fmt.Sprintf("The builds could not be compared (%v; %v).", errA, errB)
	}
	return settingsDiff(ia.Settings, ib.Settings)
}

func settingsDiff(a, b []debug.BuildSetting) string {
	get := func(ss []debug.BuildSetting, k string) string {
		for _, s := range ss {
			if s.Key == k {
				return s.Value
			}
		}
		return "(unset)"
	}
	var diffs []string
	for _, k := range comparedSettings {
		if va, vb := get(a, k), get(b, k); va != vb {
			diffs = append(diffs, fmt.Sprintf("%s %s vs %s", k, va, vb))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return "The two binaries were built differently (" + strings.Join(diffs, ", ") + "): the ratios measure that too."
}
