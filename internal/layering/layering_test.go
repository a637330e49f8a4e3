package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// TestDependencyDirection fails when a package imports, directly or through
// another package, a layer above it.
func TestDependencyDirection(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not on PATH")
	}
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"engine/...", []string{"actors", "lease", "quota", "transport", "odata", "cmd", "settings"}},
		{"actors/...", []string{"lease", "quota", "transport", "odata", "cmd", "settings"}},
		// Leases wrap whatever Counter they are given (the actors router,
		// a backend): they need the engine's types alone.
		{"lease/...", []string{"actors", "transport", "odata", "cmd", "settings", "quota"}},
		// The quota service counts through an engine.Counter it is given
		// and plans with engine/alloc: no actor, no wire.
		{"quota/...", []string{"actors", "lease", "transport", "odata", "cmd", "settings"}},
		// The environment is read at the edge: settings builds the typed
		// options of the packages below it, and only the assembly
		// (transport, cmd) reads settings.
		// It may import transport's sinks (metrics, tracing, xds,
		// tlsreload) for their options, not transport itself ("=": that
		// package alone).
		{"settings", []string{"=transport", "odata", "cmd"}},
		{"odata/...", []string{"transport", "cmd"}},
		{"transport/...", []string{"odata", "cmd"}},
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/"+r.pkg).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "matched no packages") {
				continue
			}
			t.Fatalf("go list %s: %v\n%s", r.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range r.forbidden {
				if exact, ok := strings.CutPrefix(f, "="); ok {
					if dep == module+"/"+exact {
						t.Errorf("%s depends on %s", r.pkg, dep)
					}
					continue
				}
				if dep == module+"/"+f || strings.HasPrefix(dep, module+"/"+f+"/") {
					t.Errorf("%s depends on %s", r.pkg, dep)
				}
			}
		}
	}
}
