package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// TB is the part of testing.TB the helpers need. *testing.T and *testing.B
// satisfy it; load-test programs can implement it themselves.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(string, ...any)
	Skipf(string, ...any)
	Logf(string, ...any)
	TempDir() string
}

// RequireEnv is the environment switch that turns a missing server binary
// from a skip into a failure.
const RequireEnv = "SLUICE_REQUIRE_SERVERS"

// readyTimeout bounds every readiness poll: a server that is not up by then
// is reported with its log tail instead of hanging the test.
const readyTimeout = 10 * time.Second

// startAttempts is how often a start is retried when the chosen port was
// taken between picking it and the server binding it.
const startAttempts = 4

// Required reports whether SLUICE_REQUIRE_SERVERS=1, i.e. missing servers
// must fail the test instead of skipping it.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// unavailable skips or fails (under Required) with a reason loud enough to be
// noticed in a test log.
func unavailable(t TB, format string, args ...any) {
	t.Helper()
	msg := "testenv: SERVER NOT AVAILABLE: " + fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (%s=1, so this is a failure)", msg, RequireEnv)
		return
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, RequireEnv)
}

// lookBinary finds name on PATH, then in extraDirs. pkg is the Debian package
// that provides it, named in the skip message.
func lookBinary(t TB, name, pkg string, extraDirs ...string) (string, bool) {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, d := range extraDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	unavailable(t, "binary %q not found on PATH; install it with `apt-get install %s`", name, pkg)
	return "", false
}

// freePort returns a loopback TCP port that was free a moment ago. The port
// can be taken again before the server binds it; callers retry the start.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	// Hold all listeners open until every port is chosen so the same port is
	// not handed out twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pollUntil retries cond every interval until it returns nil or timeout
// passes; it returns the last error.
func pollUntil(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// postgresBinDirs lists /usr/lib/postgresql/<v>/bin, highest version first.
func postgresBinDirs() []string {
	entries, err := os.ReadDir("/usr/lib/postgresql")
	if err != nil {
		return nil
	}
	type vdir struct {
		v   int
		dir string
	}
	var ds []vdir
	for _, e := range entries {
		v, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ds = append(ds, vdir{v, filepath.Join("/usr/lib/postgresql", e.Name(), "bin")})
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].v > ds[j].v })
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.dir
	}
	return out
}

// restartOnSamePort runs start again after a Kill. The port was ours a moment
// ago; another process can grab it, so a few attempts, but never a different
// port: clients hold the address.
func restartOnSamePort(t TB, what, log string, start func() error) {
	t.Helper()
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = start(); err == nil {
			return
		}
		if !errors.Is(err, ErrExited) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("testenv: restart %s: %v\nlog tail:\n%s", what, err, logTail(log, 40))
}
