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
		{"engine/...", []string{"actors", "lease", "quota", "transport", "server", "odata", "cmd", "settings"}},
		{"actors/...", []string{"lease", "quota", "transport", "server", "odata", "cmd", "settings"}},
		// Leases wrap whatever Counter they are given (the actors router,
		// a backend): they need the engine's types alone.
		{"lease/...", []string{"actors", "transport", "server", "odata", "cmd", "settings", "quota"}},
		// The quota service counts through an engine.Counter it is given
		// and plans with engine/alloc: no actor, no wire.
		{"quota/...", []string{"actors", "lease", "transport", "server", "odata", "cmd", "settings"}},
		// The environment is read at the edge: settings builds the typed
		// options of the packages below it, and only the assembly
		// (server, cmd) reads settings.
		// It may import transport's sinks (metrics, tracing, xds,
		// tlsreload) for their options, not transport itself ("=": that
		// package alone).
		{"settings", []string{"=transport", "server", "odata", "cmd"}},
		{"odata/...", []string{"transport", "server", "cmd"}},
		// The wire is handed what it serves, typed (transport.Options): it
		// reads no settings and never reaches back into the assembly.
		{"=transport", []string{"server", "settings", "odata", "cmd"}},
		{"transport/...", []string{"server", "odata", "cmd"}},
		// The assembly builds on every layer below it (transport, actors,
		// lease, quota, engine, settings), never on the commands or OData.
		{"server/...", []string{"odata", "cmd"}},
	}
	for _, r := range rules {
		pkg, _ := strings.CutPrefix(r.pkg, "=")
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/"+pkg).CombinedOutput()
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

// TestOnlyCommandsAssemble fails when a package outside cmd imports the
// assembly (package server): it is the top of the service, which a
// command runs; everything else is a part of it. Tests may start a whole
// service (internal/testenv/rlsserver does, for the tests of transport and
// its sinks), so only non-test imports count.
func TestOnlyCommandsAssemble(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not on PATH")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	assembly := module + "/server"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, imports := f[0], f[1:]
		if pkg == module+"/cmd" || strings.HasPrefix(pkg, module+"/cmd/") || pkg == assembly ||
			pkg == module+"/internal/testenv/rlsserver" { // test support, which no package imports
			continue
		}
		checked++
		for _, imp := range imports {
			if imp == assembly || strings.HasPrefix(imp, assembly+"/") {
				t.Errorf("%s imports %s; only cmd may", pkg, imp)
			}
			if imp == module+"/internal/testenv/rlsserver" {
				t.Errorf("%s imports %s, which is for tests", pkg, imp)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package checked")
	}
}
