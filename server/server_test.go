package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

// t0 is 4 s into a minute window, as in the engine's tests.
var t0 = time.Unix(1795313464, 0)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

type harness struct {
	srv    *transport.Server
	stats  *stats.Store
	root   string // RUNTIME_ROOT
	cfgDir string // where rule files go
	http   string // base URL of /json
	debug  string
	grpc   string
	logs   *logBuffer
	run    *rlsserver.Server
}

// start runs a memory-backed server on loopback ports. files are written to
// the config directory first; env overrides the defaults used here.
func start(t *testing.T, env map[string]string, files map[string]string) *harness {
	t.Helper()
	clk := &clock{t: t0}
	return startClock(t, env, files, clk.Now)
}

// startClock is start with the engine's clock now (nil: the real one).
func startClock(t *testing.T, env map[string]string, files map[string]string, now func() time.Time) *harness {
	t.Helper()
	root := t.TempDir()
	h := &harness{root: root, cfgDir: filepath.Join(root, "app", "config"), logs: &logBuffer{}}
	if err := os.MkdirAll(h.cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(h.cfgDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vars := map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "EXPIRATION_JITTER_MAX_SECONDS": "0", "LOG_LEVEL": "debug",
	}
	for k, v := range env {
		vars[k] = v
	}
	settings, err := settings.FromEnv(settings.FromMap(vars))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.stats = stats.NewStore()
	h.run = rlsserver.Start(t, transport.Options{Settings: settings, Logger: logger, Stats: h.stats, Clock: now})
	h.srv = h.run.Server
	a := h.srv.Addrs()
	h.http, h.debug, h.grpc = "http://"+a.HTTP.String(), "http://"+a.Debug.String(), a.GRPC.String()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// logBuffer collects the server's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}
func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

// stop stops the server (SIGTERM's path: the context ends, the servers
// drain); later calls do nothing.
func (h *harness) stop(t *testing.T) {
	h.run.Stop()
	http.DefaultClient.CloseIdleConnections()
}

func (h *harness) post(t *testing.T, path, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(h.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (h *harness) get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) grpcConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(h.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	// The rule files are the engine's: one copy serves both packages' tests.
	b, err := os.ReadFile(filepath.Join("..", "engine", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonEqual compares two JSON texts semantically (never byte for byte:
// protojson randomizes whitespace).
func jsonEqual(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("response is not JSON: %q", got)
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func settingsFor(env map[string]string) (settings.Settings, error) {
	vars := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	for k, v := range env {
		vars[k] = v
	}
	return settings.FromEnv(settings.FromMap(vars))
}

func newServer(s settings.Settings) (*transport.Server, error) {
	return transport.NewServer(context.Background(), transport.Options{Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}
