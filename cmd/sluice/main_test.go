package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// captureStdout runs fn with os.Stdout redirected.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	runErr := fn()
	os.Stdout = old
	w.Close()
	var b bytes.Buffer
	io.Copy(&b, r)
	return b.String(), runErr
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	os.WriteFile(bad, []byte("domain: e\ndescriptors:\n  - {key: a, rate_limit: {unit: eon, requests_per_unit: 1}}\n"), 0o644)
	out, err := captureStdout(t, func() error { return runConfigCheck([]string{good}) })
	if err != nil || !strings.Contains(out, "ok: 1 file(s), domains [d]") {
		t.Fatalf("good: %v %q", err, out)
	}
	algo := filepath.Join(dir, "algo.yaml")
	os.WriteFile(algo, []byte("domain: f\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}}\n"), 0o644)
	out, err = captureStdout(t, func() error { return runConfigCheck([]string{algo}) })
	if want := "  f.a: unit=SECOND requests_per_unit=2, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 4\n"; err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("algorithm: %v %q", err, out)
	}
	_, err = captureStdout(t, func() error { return runConfigCheck([]string{good, bad}) })
	if err == nil || err.Error() != bad+": invalid rate limit unit 'eon'" {
		t.Fatalf("bad: %v", err)
	}
	if err := runConfigCheck(nil); err == nil {
		t.Fatal("no files accepted")
	}
}

func TestClientAgainstAServer(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app", "config"), 0o755)
	os.WriteFile(filepath.Join(root, "app", "config", "r.yaml"), []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1000}}\n"), 0o644)
	settings, err := transport.SettingsFromEnv(transport.FromMap(map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app", "RUNTIME_WATCH_ROOT": "false",
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.NewServer(context.Background(), transport.Options{Settings: settings, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- srv.Run(ctx, ready) }()
	defer func() { cancel(); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	out, err := captureStdout(t, func() error {
		return runClient([]string{"-dial_string", srv.Addrs().GRPC.String(), "-domain", "d", "-descriptors", "a=1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The reference's client prints the response in protobuf text form.
	for _, want := range []string{"response: ", "overall_code:OK", "requests_per_unit:1000", "unit:SECOND", "limit_remaining:999"} {
		if !strings.Contains(strings.ReplaceAll(out, ": ", ":"), strings.ReplaceAll(want, ": ", ":")) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if err := runClient([]string{"-domain", "d"}); err == nil {
		t.Error("a client without descriptors ran")
	}
	if err := runClient([]string{"-domain", "d", "-descriptors", "novalue"}); err == nil {
		t.Error("a malformed descriptor was accepted")
	}
}
