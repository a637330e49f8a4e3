package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// runServer runs a memory-backed service on loopback ports until the test ends.
func runServer(t *testing.T, env map[string]string, rules string) *server.Server {
	t.Helper()
	settings, err := settings.FromEnv(settings.FromMap(serverEnv(t, env, rules)))
	if err != nil {
		t.Fatal(err)
	}
	return rlsserver.Start(t, server.Options{Settings: settings}).Server
}

// serverEnv is the environment of a memory-backed server on loopback with
// free ports and one rule file (none when rules is empty); env adds to it.
func serverEnv(t *testing.T, env map[string]string, rules string) map[string]string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app", "config"), 0o755)
	if rules != "" {
		os.WriteFile(filepath.Join(root, "app", "config", "r.yaml"), []byte(rules), 0o644)
	}
	vars := map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "USE_STATSD": "false", "DISABLE_STATS": "true",
	}
	for k, v := range env {
		vars[k] = v
	}
	return vars
}

// waitStarted waits until a server is ready, failing if it ends first or
// takes longer than a loaded machine could (testenv.EventuallyBound).
func waitStarted(t *testing.T, ready <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("server did not start")
	}
}

func TestHealthcheckCommand(t *testing.T) {
	healthy := runServer(t, nil, "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	// Listening, but unhealthy until a configuration with a domain loads.
	waiting := runServer(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, "")
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	url := func(s *server.Server) string { return "http://" + s.Addrs().HTTP.String() + "/healthcheck" }
	// -timeout 2m: the 2 s default is for a container's probe; a starved
	// test machine may answer later, which is not what is tested here.
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = healthy; otherwise a part of the error
	}{
		{"healthy", []string{"-timeout", "2m", "-url", url(healthy)}, ""},
		{"no config yet", []string{"-timeout", "2m", "-url", url(waiting)}, "answered 500"},
		{"nothing listening", []string{"-timeout", "2m", "-url", fmt.Sprintf("http://127.0.0.1:%d/healthcheck", ports[0])}, "connection refused"},
		{"bad url", []string{"-url", "http://[::1"}, "health URL"},
		{"stray argument", []string{"-url", url(healthy), "extra"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runHealthcheck(tc.args)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want healthy, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

func TestDefaultHealthURL(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "http://127.0.0.1:8080/healthcheck"},
		{map[string]string{"PORT": "9000"}, "http://127.0.0.1:9000/healthcheck"},
		{map[string]string{"HOST": "0.0.0.0", "PORT": "8080"}, "http://127.0.0.1:8080/healthcheck"},
		{map[string]string{"HOST": "::"}, "http://127.0.0.1:8080/healthcheck"},
		{map[string]string{"HOST": "10.1.2.3", "PORT": "81"}, "http://10.1.2.3:81/healthcheck"},
		{map[string]string{"HOST": "fd00::1"}, "http://[fd00::1]:8080/healthcheck"},
	} {
		if got := defaultHealthURL(settings.FromMap(tc.env)); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.env, got, tc.want)
		}
	}
}
