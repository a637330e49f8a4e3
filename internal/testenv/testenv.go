package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
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

// proc is one started server process and the goroutine that reaps it.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed once the process has been reaped
	waitErr error
}

type procSpec struct {
	name    string // for messages
	bin     string
	args    []string
	dir     string
	logPath string
	cred    *syscall.Credential
	env     []string
}

func startProc(s procSpec) (*proc, error) {
	lf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", s.name, err)
	}
	if s.cred != nil {
		// The server writes its own log when it runs as another user.
		_ = os.Chown(s.logPath, int(s.cred.Uid), int(s.cred.Gid))
	}
	fmt.Fprintf(lf, "---- testenv: %s %s\n", s.bin, strings.Join(s.args, " "))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = lf
	cmd.Stderr = lf
	if s.env != nil {
		cmd.Env = s.env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: Cleanup kills the server and all its children.
		Setpgid: true,
		// The server dies with the test binary even if Cleanup never runs.
		Pdeathsig:  syscall.SIGKILL,
		Credential: s.cred,
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", s.name, err)
	}
	p := &proc{name: s.name, cmd: cmd, logPath: s.logPath, logFile: lf, done: make(chan struct{})}
	// Owned by p: ends when the process exits, which kill() forces.
	go func() {
		p.waitErr = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the whole process group and waits until the leader is reaped.
func (p *proc) kill() {
	if p == nil {
		return
	}
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
	// Children (postgres backends) may outlive the leader by a moment; the
	// group kill above already signalled them, repeat once for late forks.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// logTail returns the last n lines of a server log for failure messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errExited reports that the server process ended during startup, usually
// because its port was taken; the caller retries on another port.
var errExited = errors.New("server exited during startup")

// waitReady polls check until it succeeds, the process exits, or the
// readiness timeout passes.
func waitReady(p *proc, check func(ctx context.Context) error) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s: %w (%v)", p.name, errExited, p.waitErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", p.name, readyTimeout, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
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
		if !errors.Is(err, errExited) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("testenv: restart %s: %v\nlog tail:\n%s", what, err, logTail(log, 40))
}
