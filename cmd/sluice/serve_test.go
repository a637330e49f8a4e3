package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// serveChild is `sluice serve` running as a child process on free loopback
// ports.
type serveChild struct {
	proc                    *testenv.Process
	odata, grpc, http, dbug string
}

// startServeChild starts `sluice serve` with env (beside the ports) and the
// flags args; it does not wait for anything.
func startServeChild(t *testing.T, env map[string]string, args ...string) *serveChild {
	t.Helper()
	ports, err := testenv.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	environ := append(os.Environ(), "SLUICE_TEST_MAIN=1", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT="+strconv.Itoa(ports[1]), "PORT="+strconv.Itoa(ports[2]), "DEBUG_PORT="+strconv.Itoa(ports[3]))
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "o.sqlite")
	p, err := testenv.StartProcess(testenv.ProcessSpec{Name: "sluice serve", Bin: os.Args[0],
		Args:    append([]string{"serve", "-db", db, "-odata-addr", addr(0), "-access-log=false"}, args...),
		LogPath: filepath.Join(t.TempDir(), "serve.log"), Env: environ})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(15 * time.Second) })
	return &serveChild{proc: p, odata: addr(0), grpc: addr(1), http: addr(2), dbug: addr(3)}
}

// odataAnswer is the status, Retry-After and body of a GET of the OData
// API's Observations (0 when nothing answers).
func (c *serveChild) odataAnswer() (int, string, string) {
	resp, err := http.Get("http://" + c.odata + "/v1/odata/v4/Observations?$top=1")
	if err != nil {
		return 0, "", ""
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, resp.Header.Get("Retry-After"), b.String()
}

// rlsAnswers is true when the gRPC port decides a request.
func (c *serveChild) rlsAnswers() bool {
	conn, err := grpc.NewClient(c.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "example", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}}}
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	return err == nil
}

func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// makeRunEnv is the environment `make run` gives sluice serve.
func makeRunEnv(t *testing.T) map[string]string {
	root, err := filepath.Abs("../../examples/runtime")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"BACKEND_TYPE": "memory", "USE_STATSD": "false", "LOG_LEVEL": "info",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false"}
}

// TestMakeRunAnswersEveryPortWhileDemoDataIsGenerated is `make run` on a
// fresh clone: the demo data (200,000 rows, most of a minute) is generated
// in the background; meanwhile the rate limit ports decide and the OData
// API answers 503 with Retry-After saying so.
func TestMakeRunAnswersEveryPortWhileDemoDataIsGenerated(t *testing.T) {
	c := startServeChild(t, makeRunEnv(t))
	testenv.Eventually(t, "the rate limit ports to answer", func() bool {
		return c.rlsAnswers() && httpOK("http://"+c.http+"/healthcheck") && httpOK("http://"+c.dbug+"/rlconfig")
	})
	code, retry, body := c.odataAnswer()
	if code != http.StatusServiceUnavailable || retry == "" || !strings.Contains(body, "demo data is being generated") {
		t.Fatalf("with the rate limit ports up, the OData API answered %d (Retry-After %q) %s\n%s", code, retry, body, c.proc.LogTail(20))
	}
}

// TestServeGeneratesDemoDataThenAnswers: once the (small) demo data is in,
// the OData API answers with data (401 without the demo key printed).
func TestServeGeneratesDemoDataThenAnswers(t *testing.T) {
	c := startServeChild(t, makeRunEnv(t), "-demo-rows", "300")
	testenv.Eventually(t, "the OData API to answer after generating", func() bool {
		code, _, _ := c.odataAnswer()
		return code == http.StatusUnauthorized
	})
	testenv.Eventually(t, "the demo key to be printed", func() bool {
		n, _ := c.proc.CountLogLines("Demo API key: ")
		return n == 1
	})
}

// TestServeWithAnUnreachableBackend is `sluice serve` with the reference's
// default backend (a Redis socket that is not there): the log says once
// what was tried and how to choose another backend, and the OData API
// starts meanwhile.
func TestServeWithAnUnreachableBackend(t *testing.T) {
	env := makeRunEnv(t)
	delete(env, "BACKEND_TYPE")
	env["REDIS_URL"] = filepath.Join(t.TempDir(), "ratelimit.sock")
	env["LOG_LEVEL"] = "warn"
	env["BACKEND_TPYE"] = "memory" // the misspelling a user made: warned of, and Redis is tried
	c := startServeChild(t, env, "-demo-rows", "300")
	testenv.Eventually(t, "the OData API to answer with the backend unreachable", func() bool {
		code, _, _ := c.odataAnswer()
		return code == http.StatusUnauthorized
	})
	testenv.Eventually(t, "the unreachable backend to be logged", func() bool {
		n, _ := c.proc.CountLogLines("cannot reach Redis at ")
		return n > 0
	})
	if n, _ := c.proc.CountLogLines("cannot reach Redis at "); n != 1 {
		t.Errorf("the unreachable backend was logged %d times, want once", n)
	}
	log := c.proc.LogTail(200)
	for _, want := range []string{env["REDIS_URL"], "REDIS_SOCKET_TYPE=unix", "BACKEND_TYPE=memory", "REDIS_URL=host:6379", "retrying quietly",
		"BACKEND_TPYE is not a setting sluice reads; did you mean BACKEND_TYPE?"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if httpOK("http://" + c.http + "/healthcheck") {
		t.Error("the rate limit service answers without its backend")
	}
}
