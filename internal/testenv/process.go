package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one started server process (a test server, sluice, or a system
// a benchmark measures) and the goroutine that reaps it. Every program that
// starts a process to talk to it — tests, bench, the load-test scenarios —
// starts it here, so that a process group, a log, the parent-death signal and
// a bounded wait for readiness are the same everywhere.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has been reaped
	waitErr error
}

// ProcessSpec says how to start a Process.
type ProcessSpec struct {
	Name    string // for messages
	Bin     string
	Args    []string
	Dir     string
	LogPath string // stdout and stderr are appended here
	Cred    *syscall.Credential
	Env     []string // nil: this process's environment
}

// StartProcess starts s in its own process group with a parent-death
// signal. It does not wait for readiness; see WaitReady.
func StartProcess(s ProcessSpec) (*Process, error) {
	lf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", s.Name, err)
	}
	if s.Cred != nil {
		// The server writes its own log when it runs as another user.
		_ = os.Chown(s.LogPath, int(s.Cred.Uid), int(s.Cred.Gid))
	}
	fmt.Fprintf(lf, "---- testenv: %s %s\n", s.Bin, strings.Join(s.Args, " "))
	cmd := exec.Command(s.Bin, s.Args...)
	cmd.Dir = s.Dir
	cmd.Stdout = lf
	cmd.Stderr = lf
	if s.Env != nil {
		cmd.Env = s.Env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: Kill ends the server and all its children, and
		// a terminal's Ctrl-C reaches the program, which decides when the
		// server gets its signal.
		Setpgid: true,
		// The server dies with its parent even if no cleanup ever runs.
		Pdeathsig:  syscall.SIGKILL,
		Credential: s.Cred,
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Process{name: s.Name, cmd: cmd, logPath: s.LogPath, done: make(chan struct{})}
	// Owned by p: ends when the process exits, which Kill forces.
	go func() {
		p.waitErr = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status once Done is closed: -1 for a death by signal.
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// WaitErr is what waiting for the process returned, once Done is closed.
func (p *Process) WaitErr() error {
	<-p.done
	return p.waitErr
}

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(p.cmd.Process.Pid, sig)
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the
// group. It reports a non-zero exit or a kill as an error.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		if code := p.ExitCode(); code != 0 {
			return fmt.Errorf("%s exited %d after SIGTERM", p.name, code)
		}
		return nil
	case <-t.C:
		p.Kill()
		return fmt.Errorf("%s still running %s after SIGTERM; killed", p.name, grace)
	}
}

// Kill SIGKILLs the whole process group and waits until the leader is reaped.
func (p *Process) Kill() {
	if p == nil {
		return
	}
	if !p.Exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
	// Children (postgres backends) may outlive the leader by a moment; the
	// group kill above already signalled them, repeat once for late forks.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// LogPath is where the process's output goes.
func (p *Process) LogPath() string { return p.logPath }

// LogTail is the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return logTail(p.logPath, n) }

// CountLogLines counts the occurrences of substr in the process's log (the
// lines that hold it, for a substr that is one log line's text).
func (p *Process) CountLogLines(substr string) (int, error) {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return 0, fmt.Errorf("testenv: %w", err)
	}
	return bytes.Count(b, []byte(substr)), nil
}

// logTail returns the last n lines of a server log for failure messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return TailLines(string(b), n)
}

// TailLines is the last n lines of s, for messages that quote a log.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ErrExited reports that a process ended while it was awaited, usually
// because its port was taken; the caller retries on another port.
var ErrExited = errors.New("exited during startup")

// WaitReady polls check until it succeeds, the process exits (ErrExited),
// ctx ends, or timeout passes; each check gets a second at most.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, check func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("%s: %w (%v)", p.name, ErrExited, p.waitErr)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", p.name, timeout, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitReady is WaitReady with the test servers' readiness bound.
func waitReady(p *Process, check func(ctx context.Context) error) error {
	return p.WaitReady(context.Background(), readyTimeout, check)
}

// DialCheck is a readiness check: addr accepts a TCP connection.
func DialCheck(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// HTTPCheck is a readiness check: a GET of url is answered — with 200 when
// want200, with any status otherwise.
func HTTPCheck(url string, want200 bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if want200 && resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s answered %d", url, resp.StatusCode)
		}
		return nil
	}
}

// server holds the process of a test server that is started, killed and
// restarted on the same port (Redis, Memcached). Kill may race with a
// Restart in another goroutine, hence the lock.
type server struct {
	mu sync.Mutex
	p  *Process
}

// start starts spec and waits until check passes. The process is kept from
// the moment it runs, so that a Kill finds it.
func (s *server) start(spec ProcessSpec, check func(context.Context) error) error {
	p, err := StartProcess(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
	if err := waitReady(p, check); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// kill SIGKILLs the current process; calling it twice is fine.
func (s *server) kill() {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	p.Kill()
}

// startOnFreePorts runs configure (which picks ports) and start, and again
// on new ports while the server exits during startup: most likely its port
// was taken in between.
func startOnFreePorts(configure, start func() error) error {
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = configure(); err != nil {
			return err
		}
		if err = start(); err == nil || !errors.Is(err, ErrExited) {
			return err
		}
	}
	return err
}

// restart starts the server again after killing it, on the same port.
func (s *server) restart(t TB, what, log string, start func() error) {
	t.Helper()
	s.kill()
	restartOnSamePort(t, what, log, start)
}

// lineReply sends one command line to a text-protocol server (Redis,
// memcached) and returns the first reply line: the readiness probes.
func lineReply(ctx context.Context, network, addr string, tcfg *tls.Config, cmd string) (string, error) {
	var (
		c   net.Conn
		err error
	)
	if tcfg != nil {
		d := tls.Dialer{Config: tcfg}
		c, err = d.DialContext(ctx, network, addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}
