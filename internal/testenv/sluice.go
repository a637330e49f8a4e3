package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
		return errors.New("testenv: SluiceConfig.Bin is empty")
	case c.Backend != "memory" && c.Backend != "redis" && c.Backend != "memcache":
		return fmt.Errorf("testenv: backend %q is not memory, redis or memcache", c.Backend)
	case c.Backend == "redis" && c.RedisAddr == "":
		return errors.New("testenv: the redis backend needs RedisAddr")
	case c.RuntimeRoot == "" || c.Subdirectory == "":
		return errors.New("testenv: RuntimeRoot and Subdirectory are required")
	case c.LogPath == "":
		return errors.New("testenv: LogPath is required")
	case c.BackendTimeout < 0:
		return errors.New("testenv: BackendTimeout is negative")
	case c.StartTimeout <= 0:
		return errors.New("testenv: StartTimeout must be positive")
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("testenv: sluice binary: %w (run make build)", err)
	}
	return nil
}

// ConfigDir is where the rule files go.
func (c SluiceConfig) ConfigDir() string {
	return filepath.Join(c.RuntimeRoot, c.Subdirectory, "config")
}

// Sluice is a running `sluice ratelimit` process on loopback ports.
type Sluice struct {
	*Process
	GRPC, HTTP, Debug string // host:port
}

// StartSluice starts sluice and waits until /healthcheck answers 200. A
// start that loses one of its picked ports to another process is retried on
// new ports.
func StartSluice(ctx context.Context, cfg SluiceConfig) (*Sluice, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.ConfigDir(), 0o755); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startSluiceOnce(ctx, cfg)
		if err == nil {
			return s, nil
		}
		last = err
		if !errors.Is(err, ErrExited) {
			break
		}
	}
	return nil, last
}

func startSluiceOnce(ctx context.Context, cfg SluiceConfig) (*Sluice, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &Sluice{
		GRPC:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HTTP:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		Debug: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
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
	p, err := StartProcess(ProcessSpec{Name: "sluice ratelimit (grpc " + s.GRPC + ")", Bin: cfg.Bin, Args: []string{"ratelimit"}, LogPath: cfg.LogPath, Env: env})
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	s.Process = p
	err = p.WaitReady(ctx, cfg.StartTimeout, HTTPCheck("http://"+s.HTTP+"/healthcheck", true))
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("testenv: %w; log tail:\n%s", err, p.LogTail(20))
	}
	return s, nil
}

// WriteRules writes (truncates and rewrites, in place) one rule file in the
// configuration directory; with RUNTIME_WATCH_ROOT=false sluice reloads.
func WriteRules(cfg SluiceConfig, name, yaml string) error {
	if err := os.MkdirAll(cfg.ConfigDir(), 0o755); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ConfigDir(), name), []byte(yaml), 0o644); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	return nil
}

// SluiceGenerate fills the OData store dsn with rows generated observations
// (`sluice generate`).
func SluiceGenerate(ctx context.Context, bin, dsn string, rows int) error {
	if b, err := exec.CommandContext(ctx, bin, "generate", "-db", dsn, "-rows", strconv.Itoa(rows)).CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: sluice generate: %w\n%s", err, TailLines(string(b), 10))
	}
	return nil
}

// SluiceAddKey creates an API key named name in the OData store dsn (`sluice
// keys add`) and returns its secret, the last line the command prints.
func SluiceAddKey(ctx context.Context, bin, dsn, name string) (string, error) {
	b, err := exec.CommandContext(ctx, bin, "keys", "add", "-db", dsn, name).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testenv: sluice keys add: %w\n%s", err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}
