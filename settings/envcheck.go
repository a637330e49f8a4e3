package settings

import (
	"fmt"
	"strings"
)

// A misspelt setting is otherwise silently ignored: BACKEND_TPYE=memory
// falls back to Redis, SLUICE_BACKEND_TIMOUT to the default. EnvWarnings
// names them at start.

// EnvWarnings returns one warning per variable of environ ("NAME=value"
// lines, as os.Environ) that looks meant for sluice but is not read: every
// SLUICE_* variable sluice does not know, and any other variable within a
// typo of a known one. The known names are those FromEnv reads,
// plus extra (the commands' own, like SLUICE_DB).
func EnvWarnings(environ []string, extra ...string) []string {
	set := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	known := map[string]bool{}
	for _, k := range extra {
		known[k] = true
	}
	record := func(src map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			known[k] = true
			v, ok := src[k]
			return v, ok
		}
	}
	// Once with nothing set (every default read) and once as configured
	// (what only some settings read); a settings error is reported elsewhere.
	_, _ = FromEnv(record(nil))
	_, _ = FromEnv(record(set))
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if known[name] {
			continue
		}
		closest, d := closestName(name, known)
		switch {
		case strings.HasPrefix(name, "SLUICE_") && d <= max(2, len(name)/4):
			out = append(out, fmt.Sprintf("environment: %s is not a setting sluice reads; did you mean %s? (docs/configuration.md lists them all)", name, closest))
		case strings.HasPrefix(name, "SLUICE_"):
			out = append(out, fmt.Sprintf("environment: %s is not a setting sluice reads (docs/configuration.md lists them all)", name))
		case nearMiss(name, d):
			out = append(out, fmt.Sprintf("environment: %s is not a setting sluice reads; did you mean %s? It is ignored", name, closest))
		}
	}
	return out
}

// nearMiss says whether a variable that is not sluice's is so close to one
// of its names (distance d) that it is likely a typo of it. Short names
// (HOME against HOST) and names of other shapes are left alone.
func nearMiss(name string, d int) bool {
	if len(name) < 6 || !strings.Contains(name, "_") || strings.ToUpper(name) != name {
		return false
	}
	if len(name) < 10 {
		return d == 1
	}
	return d <= 2
}

// closestName is the known name nearest to name and its distance.
func closestName(name string, known map[string]bool) (string, int) {
	best, bestD := "", int(^uint(0)>>1)
	for k := range known {
		if d := editDistance(name, k); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best, bestD
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours (TPYE, TYPE)
// each count one.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
