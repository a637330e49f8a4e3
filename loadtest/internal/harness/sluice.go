package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/testenv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SluiceConfig says how to start `sluice ratelimit` for a scenario.
type SluiceConfig struct {
	// Bin is the sluice binary (make build writes bin/sluice).
	Bin string
	// Backend is BACKEND_TYPE: memory, redis or memcache.
	Backend string
	// RedisAddr is the Redis host:port when Backend is redis.
	RedisAddr string
	// RuntimeRoot/Subdirectory/config/*.yaml are the rules; they are
	// watched with RUNTIME_WATCH_ROOT=false, so rewriting a file reloads.
	RuntimeRoot  string
	Subdirectory string
	// BackendTimeout is SLUICE_BACKEND_TIMEOUT; zero keeps sluice's default.
	BackendTimeout time.Duration
	// LogPath receives the server's stdout and stderr.
	LogPath string
	// LogLevel is LOG_LEVEL; the reload scenario needs info to count reloads.
	LogLevel string
	// Env holds extra KEY=VALUE settings; they come last, so they win.
	Env []string
	// StartTimeout bounds the wait for /healthcheck to answer 200.
	StartTimeout time.Duration
}

// DefaultSluiceConfig is bin/sluice on the memory backend with rules under
// root/loadtest/config.
func DefaultSluiceConfig(root string) SluiceConfig {
	return SluiceConfig{
		Bin:          "bin/sluice",
		Backend:      "memory",
		RuntimeRoot:  root,
		Subdirectory: "loadtest",
		LogPath:      filepath.Join(root, "sluice.log"),
		LogLevel:     "warn",
		StartTimeout: 20 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c SluiceConfig) Validate() error {
	switch {
	case c.Bin == "":
		return errors.New("harness: SluiceConfig.Bin is empty")
	case c.Backend != "memory" && c.Backend != "redis" && c.Backend != "memcache":
		return fmt.Errorf("harness: backend %q is not memory, redis or memcache", c.Backend)
	case c.Backend == "redis" && c.RedisAddr == "":
		return errors.New("harness: the redis backend needs RedisAddr")
	case c.RuntimeRoot == "" || c.Subdirectory == "":
		return errors.New("harness: RuntimeRoot and Subdirectory are required")
	case c.LogPath == "":
		return errors.New("harness: LogPath is required")
	case c.BackendTimeout < 0:
		return errors.New("harness: BackendTimeout is negative")
	case c.StartTimeout <= 0:
		return errors.New("harness: StartTimeout must be positive")
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("harness: sluice binary: %w (run make build)", err)
	}
	return nil
}

// ConfigDir is where the rule files go.
func (c SluiceConfig) ConfigDir() string {
	return filepath.Join(c.RuntimeRoot, c.Subdirectory, "config")
}

// Sluice is a running `sluice ratelimit` process on loopback ports.
type Sluice struct {
	GRPC, HTTP, Debug string // host:port

	cfg     SluiceConfig
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process is reaped
	waitErr error
}

// StartSluice starts sluice and waits until /healthcheck answers 200. A
// start that loses one of its picked ports to another process is retried on
// new ports.
func StartSluice(ctx context.Context, cfg SluiceConfig) (*Sluice, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.ConfigDir(), 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startSluiceOnce(ctx, cfg)
		if err == nil {
			return s, nil
		}
		last = err
		if !errors.Is(err, errExitedEarly) {
			break
		}
	}
	return nil, last
}

var errExitedEarly = errors.New("sluice exited during startup")

func startSluiceOnce(ctx context.Context, cfg SluiceConfig) (*Sluice, error) {
	ports, err := testenv.FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &Sluice{
		GRPC:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HTTP:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		Debug: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		cfg:   cfg,
		done:  make(chan struct{}),
	}
	// A clean environment: a REDIS_URL in the caller's shell must not
	// contradict the KVSTORE_URL given here (sluice refuses the pair).
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"BACKEND_TYPE=" + cfg.Backend,
		"USE_STATSD=false", "DISABLE_STATS=true",
		"LOG_LEVEL=" + cfg.LogLevel,
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(ports[0]), "PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"RUNTIME_ROOT=" + cfg.RuntimeRoot, "RUNTIME_SUBDIRECTORY=" + cfg.Subdirectory, "RUNTIME_WATCH_ROOT=false",
	}
	if cfg.Backend == "redis" {
		env = append(env, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+cfg.RedisAddr)
	}
	if cfg.BackendTimeout > 0 {
		env = append(env, "SLUICE_BACKEND_TIMEOUT="+cfg.BackendTimeout.String())
	}
	env = append(env, cfg.Env...)

	lf, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: sluice log: %w", err)
	}
	fmt.Fprintf(lf, "---- harness: %s ratelimit (grpc %s, http %s, debug %s)\n", cfg.Bin, s.GRPC, s.HTTP, s.Debug)
	s.cmd = exec.Command(cfg.Bin, "ratelimit")
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a terminal's Ctrl-C reaches the scenario,
		// which decides when sluice gets its signal.
		Setpgid: true,
		// Never outlive the scenario, even if it dies before cleaning up.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := s.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("harness: start %s: %w", cfg.Bin, err)
	}
	// Owned by s: ends when the process exits; Stop and Kill force that.
	go func() {
		s.waitErr = s.cmd.Wait()
		lf.Close()
		close(s.done)
	}()
	if err := s.waitHealthy(ctx, cfg.StartTimeout); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

func (s *Sluice) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	var last error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("harness: %w (%v); log tail:\n%s", errExitedEarly, s.waitErr, s.LogTail(20))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get("http://" + s.HTTP + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/healthcheck answered %d", resp.StatusCode)
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: sluice not healthy after %s: %w; log tail:\n%s", timeout, last, s.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the server's process id.
func (s *Sluice) PID() int { return s.cmd.Process.Pid }

// Signal sends sig to the server.
func (s *Sluice) Signal(sig syscall.Signal) error {
	return syscall.Kill(s.cmd.Process.Pid, sig)
}

// Done is closed once the process has exited and been reaped.
func (s *Sluice) Done() <-chan struct{} { return s.done }

// ExitCode is the exit status once Done is closed: -1 for a death by signal.
func (s *Sluice) ExitCode() int { return s.cmd.ProcessState.ExitCode() }

// Stop sends SIGTERM and waits up to grace for the exit, then kills.
// It reports a non-zero exit or a kill as an error.
func (s *Sluice) Stop(grace time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
		if code := s.ExitCode(); code != 0 {
			return fmt.Errorf("harness: sluice exited %d after SIGTERM", code)
		}
		return nil
	case <-t.C:
		s.Kill()
		return fmt.Errorf("harness: sluice still running %s after SIGTERM; killed", grace)
	}
}

// Kill SIGKILLs the server and waits until it is reaped.
func (s *Sluice) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// LogTail is the last n lines of the server's log.
func (s *Sluice) LogTail(n int) string {
	b, err := os.ReadFile(s.cfg.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// CountLogLines counts the lines of the server's log that contain substr.
func (s *Sluice) CountLogLines(substr string) (int, error) {
	b, err := os.ReadFile(s.cfg.LogPath)
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	return strings.Count(string(b), substr), nil
}

// WriteRules writes (truncates and rewrites, in place) one rule file in the
// configuration directory; with RUNTIME_WATCH_ROOT=false sluice reloads.
func WriteRules(cfg SluiceConfig, name, yaml string) error {
	if err := os.MkdirAll(cfg.ConfigDir(), 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ConfigDir(), name), []byte(yaml), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}
