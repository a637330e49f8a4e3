package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// runSluice runs the sluice command as a child process, as a person at a
// terminal does, and returns its exit status and output.
func runSluice(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "SLUICE_TEST_MAIN=1"), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, o.String(), e.String()
}

// TestEveryCommandHelp: `sluice CMD -h` exits 0 and prints the usage, the
// flags with their defaults and the environment variables that matter.
func TestEveryCommandHelp(t *testing.T) {
	want := map[string][]string{
		"serve":     {"usage: sluice serve", "-db", "-odata-addr", "BACKEND_TYPE", "REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "memory", "SLUICE_DB"},
		"ratelimit": {"usage: sluice ratelimit", "BACKEND_TYPE", "redis", "REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "RUNTIME_ROOT", "GRPC_PORT", "8081"},
		"odata":     {"usage: sluice odata", "-db", "(default \"sqlite:var/odata.sqlite\")", "SLUICE_DB"},
		"client":    {"usage: sluice client", "-dial_string", "localhost:8081"},
		"keys":      {"usage: sluice keys", "-db", "SLUICE_DB"},
		"generate":  {"usage: sluice generate", "-rows", "SLUICE_DB"},
		"import":    {"usage: sluice import", "-metadata"},
		"proto":     {"usage: sluice proto", "-o"},
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runSluice(t, nil, c.name, "-h")
			if code != 0 || !strings.Contains(out, "usage: sluice") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for _, w := range want[c.name] {
				if !strings.Contains(out, w) {
					t.Errorf("-h lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if code, out, _ := runSluice(t, nil, "--help"); code != 0 || !strings.Contains(out, "sluice <command> -h") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

// TestUsageErrorsExitTwo: a command line that cannot run exits 2 in every
// command, as the flag package's convention and the reference's client.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-bogus"}, {"ratelimit", "-bogus"}, {"ratelimit", "extra"}, {"odata", "-bogus"}, {"client", "-bogus"},
		{"config-check"}, {"config-check", "-bogus"}, {"config_check", "-config_dirr", "x"},
		{"keys"}, {"keys", "frob"}, {"keys", "add"}, {"keys", "list", "-bogus"}, {"healthcheck", "extra"},
		{"generate", "extra"}, {"import"}, {"version", "extra"}, {"proto", "extra"}, {"nosuchcommand"}, {},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if code, out, errOut := runSluice(t, nil, args...); code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := runSluice(t, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
}

// TestKeysFlagsAfterArgumentsAndReadOnly: `keys revoke tester -db X` works
// with the flag after the argument; `keys list` on a store that does not
// exist fails and creates nothing, not even its directory.
func TestKeysFlagsAfterArgumentsAndReadOnly(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "k.sqlite")
	if code, out, errOut := runSluice(t, nil, "keys", "add", "tester", "-db", db); code != 0 || !strings.Contains(out, "(tester) created") {
		t.Fatalf("add with -db after the name: exit %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runSluice(t, nil, "keys", "list", "-db", db); code != 0 || !strings.Contains(out, "tester") {
		t.Fatalf("list: exit %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runSluice(t, nil, "keys", "revoke", "tester", "-db", db); code != 0 || !strings.Contains(out, "revoked 1 key(s)") {
		t.Fatalf("revoke with -db after the name: exit %d %q %q", code, out, errOut)
	}
	missing := filepath.Join(dir, "nonexistent", "x.sqlite")
	code, _, errOut := runSluice(t, nil, "keys", "list", "-db", "sqlite:"+missing)
	if code != 1 || !strings.Contains(errOut, "nothing was created") {
		t.Errorf("list of a missing store: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("keys list created %s (%v)", filepath.Dir(missing), err)
	}
}

// TestConfigCheckReportsEveryBrokenFile: five broken files, five reports.
func TestConfigCheckReportsEveryBrokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	broken := map[string]string{
		"unit.yaml":     "domain: e\ndescriptors:\n  - {key: a, rate_limit: {unit: eon, requests_per_unit: 1}}\n",
		"yaml.yaml":     "domain: [\n",
		"nodomain.yaml": "descriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n",
		"nokey.yaml":    "domain: g\ndescriptors:\n  - {rate_limit: {unit: second, requests_per_unit: 1}}\n",
	}
	args := []string{"config-check", good}
	for name, body := range broken {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		args = append(args, p)
	}
	args = append(args, filepath.Join(dir, "missing.yaml"))
	code, out, errOut := runSluice(t, nil, args...)
	if code != 1 || !strings.Contains(errOut, "5 of 6 file(s) broken") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for name := range broken {
		if !strings.Contains(errOut, filepath.Join(dir, name)) {
			t.Errorf("no report of %s:\n%s", name, errOut)
		}
	}
	if !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("no report of the missing file:\n%s", errOut)
	}
}

func TestParseFlagsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args []string
		db   string
		pos  []string
	}{
		{[]string{"a", "-db", "x", "b"}, "x", []string{"a", "b"}},
		{[]string{"-db", "x", "a"}, "x", []string{"a"}},
		{[]string{"a", "--", "-db", "x"}, "d", []string{"a", "-db", "x"}},
		{[]string{"a", "-db=y"}, "y", []string{"a"}},
	} {
		fs := newFlagSet("t", "t")
		db := fs.String("db", "d", "")
		if err := parseFlags(fs, tc.args); err != nil {
			t.Fatal(err)
		}
		if *db != tc.db || strings.Join(fs.Args(), " ") != strings.Join(tc.pos, " ") {
			t.Errorf("%v: db %q args %q", tc.args, *db, fs.Args())
		}
	}
}

// FuzzParseFlags: any command line parses without a panic, and every
// positional argument it returns was an argument given.
func FuzzParseFlags(f *testing.F) {
	f.Add("keys\x00revoke\x00tester\x00-db\x00x")
	f.Add("-db=y\x00--\x00-db")
	f.Add("-h")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		fs := newFlagSet("t", "t")
		fs.String("db", "d", "")
		fs.Bool("v", false, "")
		fs.SetOutput(io.Discard)
		if err := parseFlags(fs, args); err != nil {
			return
		}
		given := map[string]bool{}
		for _, a := range args {
			given[a] = true
		}
		for _, a := range fs.Args() {
			if !given[a] {
				t.Fatalf("%q: positional %q was not given", args, a)
			}
		}
	})
}
