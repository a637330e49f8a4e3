package rlsserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// The harness below is the one the tests of package server (the assembly)
// and package transport (the wire) start a whole service with: the wire's
// tests need real decisions behind it, the assembly's a real wire in
// front.

// T0 is 4 s into a minute window, as in the engine's tests.
var T0 = time.Unix(1795313464, 0)

// Harness is a running service with what its tests reach it by.
type Harness struct {
	Srv    *server.Server
	Stats  *stats.Store
	Root   string // RUNTIME_ROOT
	CfgDir string // where rule files go
	HTTP   string // base URL of /json
	Debug  string // base URL of the debug server
	GRPC   string // the gRPC address
	Logs   *LogBuffer
	Run    *Server
}

// StartEnv runs a memory-backed server on loopback ports. files are written to
// the config directory first; env overrides the defaults used here.
func StartEnv(t *testing.T, env map[string]string, files map[string]string) *Harness {
	t.Helper()
	clk := testenv.NewClock(T0)
	return StartEnvClock(t, env, files, clk.Now)
}

// StartEnvClock is StartEnv with the engine's clock now (nil: the real one).
func StartEnvClock(t *testing.T, env map[string]string, files map[string]string, now func() time.Time) *Harness {
	t.Helper()
	root := t.TempDir()
	h := &Harness{Root: root, CfgDir: filepath.Join(root, "app", "config"), Logs: &LogBuffer{}}
	vars := map[string]string{"LOG_LEVEL": "debug"}
	for k, v := range env {
		vars[k] = v
	}
	settings := Settings(t, root, files, vars)
	logger := slog.New(slog.NewTextHandler(h.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.Stats = stats.NewStore()
	h.Run = Start(t, server.Options{Settings: settings, Logger: logger, Stats: h.Stats, Clock: now})
	h.Srv = h.Run.Server
	a := h.Srv.Addrs()
	h.HTTP, h.Debug, h.GRPC = "http://"+a.HTTP.String(), "http://"+a.Debug.String(), a.GRPC.String()
	t.Cleanup(func() { h.Stop(t) })
	return h
}

// Settings writes files into root's rule directory (RUNTIME_ROOT root,
// RUNTIME_SUBDIRECTORY app, its config folder) and reads the settings of
// a memory-backed service on loopback ports, with env on top of the test
// defaults.
func Settings(t testing.TB, root string, files, env map[string]string) settings.Settings {
	t.Helper()
	dir := filepath.Join(root, "app", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vars := map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "EXPIRATION_JITTER_MAX_SECONDS": "0",
	}
	for k, v := range env {
		vars[k] = v
	}
	s, err := settings.FromEnv(settings.FromMap(vars))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// LogBuffer collects the server's log lines for assertions.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}
func (l *LogBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

// Stop stops the server (SIGTERM's path: the context ends, the servers
// drain); later calls do nothing.
func (h *Harness) Stop(t *testing.T) {
	h.Run.Stop()
	http.DefaultClient.CloseIdleConnections()
}

// Post posts body to the HTTP port's path: status, header and body.
func (h *Harness) Post(t *testing.T, path, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(h.HTTP+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Get gets url: status and body.
func (h *Harness) Get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// GRPCConn is a plaintext client of the gRPC port, closed with the test.
func (h *Harness) GRPCConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(h.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ReadRules is the text of the engine's rule file name (engine/testdata),
// read from a package one directory below the module root.
func ReadRules(t *testing.T, name string) string {
	t.Helper()
	// The rule files are the engine's: one copy serves every package's tests.
	b, err := os.ReadFile(filepath.Join("..", "engine", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// JSONEqual compares two JSON texts semantically (never byte for byte:
// protojson randomizes whitespace).
func JSONEqual(t *testing.T, got, want string) bool {
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

// SettingsFor is env over loopback addresses on ports the kernel picks.
func SettingsFor(env map[string]string) (settings.Settings, error) {
	vars := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	for k, v := range env {
		vars[k] = v
	}
	return settings.FromEnv(settings.FromMap(vars))
}

// NewServer builds a service from s that logs nowhere.
func NewServer(s settings.Settings) (*server.Server, error) {
	return server.NewServer(context.Background(), server.Options{Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// RLSReq is a request with one descriptor of the key and value pairs.
func RLSReq(domain string, pairs ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// ForEachGRPCServer runs a test against each gRPC server the gRPC port may
// have (SLUICE_GRPC_SERVER): what clients see must not depend on it.
func ForEachGRPCServer(t *testing.T, f func(t *testing.T, env map[string]string)) {
	for _, name := range GRPCServers {
		t.Run(name, func(t *testing.T) { f(t, map[string]string{"SLUICE_GRPC_SERVER": name}) })
	}
}

// With is env plus one variable.
func With(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range env {
		out[a] = b
	}
	return out
}

// GRPCServers are the gRPC servers the gRPC port may have
// (SLUICE_GRPC_SERVER).
var GRPCServers = []string{"native", "grpc-go"}

// AnyValueRule limits every value of key k in domain d to 10 a minute.
const AnyValueRule = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"

// QuotaRules are the RLQS tests' rules: domain q, key user, with a value
// always denied (free) and one never limited (vip).
const QuotaRules = `domain: q
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: user
    value: free
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
`

// ExactRules share 10,000 decisions an hour out among keys values of key
// k in domain x.
func ExactRules(keys int) map[string]string {
	return map[string]string{"x.yaml": fmt.Sprintf("domain: x\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: %d}}\n", 10000/keys)}
}

// VerifyNoLeaks runs a package's tests (TestMain) and fails them if a
// goroutine outlives them, but for protoactor's throttles, which it never
// stops.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}
