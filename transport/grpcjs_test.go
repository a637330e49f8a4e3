package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testenv"
)

// grpcjsDir holds gRPC's JavaScript client, pinned by package-lock.json,
// and the script that drives it; `make test` installs it (make test-npm).
const grpcjsDir = "testdata/grpcjs"

type jsCall struct {
	Name       string `json:"name"`
	Method     string `json:"method"`
	Request    []byte `json:"request"` // base64 in JSON
	Stream     bool   `json:"stream,omitempty"`
	Gzip       bool   `json:"gzip,omitempty"`
	DeadlineMs *int   `json:"deadlineMs,omitempty"`
}

type jsResult struct {
	Name     string     `json:"name"`
	Code     codes.Code `json:"code"`
	Details  string     `json:"details"`
	Messages [][]byte   `json:"messages"`
}

// TestGRPCJSClient: gRPC's client for JavaScript (@grpc/grpc-js), a stack
// not written in Go, against each gRPC server, in plaintext and over TLS:
// decisions, with gzip and deadlines, errors, health Check and Watch.
func TestGRPCJSClient(t *testing.T) {
	node := grpcjsNode(t)
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		for _, useTLS := range []bool{false, true} {
			t.Run(map[bool]string{false: "plaintext", true: "TLS"}[useTLS], func(t *testing.T) {
				env := srv
				var ca []byte
				if useTLS {
					caFile, cert, key := testenv.GenerateTLS(t, t.TempDir())
					env = with(with(with(env, "GRPC_SERVER_USE_TLS", "true"), "GRPC_SERVER_TLS_CERT", cert), "GRPC_SERVER_TLS_KEY", key)
					var err error
					if ca, err = os.ReadFile(caFile); err != nil {
						t.Fatal(err)
					}
				}
				h := start(t, env, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
				grpcjsCalls(t, node, h, ca)
			})
		}
	})
}

func grpcjsCalls(t *testing.T, node string, h *harness, ca []byte) {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	decide := marshal(rlsReq("probe", "k", "persec"))
	health := marshal(&healthpb.HealthCheckRequest{Service: "ratelimit"})
	rls := rlsv3.RateLimitService_ShouldRateLimit_FullMethodName
	ms := func(n int) *int { return &n }
	calls := []jsCall{
		{Name: "decide", Method: rls, Request: decide},
		{Name: "decide, gzip", Method: rls, Request: decide, Gzip: true},
		{Name: "decide, gzip again", Method: rls, Request: decide, Gzip: true},
		{Name: "decide, deadline", Method: rls, Request: decide, DeadlineMs: ms(60_000)},
		{Name: "decide, gzip and deadline", Method: rls, Request: decide, Gzip: true, DeadlineMs: ms(60_000)},
		{Name: "bad request", Method: rls, Request: marshal(rlsReq("", "k", "persec"))},
		{Name: "bad request, gzip", Method: rls, Request: marshal(rlsReq("", "k", "persec")), Gzip: true},
		{Name: "unknown method", Method: "/sluice.Nope/Nothing", Request: decide},
		{Name: "health check", Method: "/grpc.health.v1.Health/Check", Request: health},
		{Name: "health check, gzip", Method: "/grpc.health.v1.Health/Check", Request: health, Gzip: true},
		{Name: "health watch", Method: "/grpc.health.v1.Health/Watch", Request: health, Stream: true},
		{Name: "health watch, gzip", Method: "/grpc.health.v1.Health/Watch", Request: health, Stream: true, Gzip: true},
		{Name: "deadline passed", Method: rls, Request: decide, DeadlineMs: ms(-1000)},
		{Name: "decide after", Method: rls, Request: decide, Gzip: true},
	}
	spec := map[string]any{"target": h.GRPC, "calls": calls}
	if ca != nil {
		spec["ca"] = string(ca)
	}
	arg, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.js", string(arg))
	cmd.Dir = grpcjsDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.js: %v\n%s", err, stderr.String())
	}
	var results []jsResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("client.js output %q: %v", out, err)
	}
	if len(results) != len(calls) {
		t.Fatalf("%d results for %d calls", len(results), len(calls))
	}
	got := map[string]jsResult{}
	for _, r := range results {
		got[r.Name] = r
	}
	// The clock stands still: each decision counts one more hit.
	// The call past its deadline counts nothing.
	for i, name := range []string{"decide", "decide, gzip", "decide, gzip again", "decide, deadline", "decide, gzip and deadline", "decide after"} {
		r := got[name]
		var resp rlsv3.RateLimitResponse
		if r.Code != codes.OK || len(r.Messages) != 1 || proto.Unmarshal(r.Messages[0], &resp) != nil {
			t.Errorf("%s: %v %q", name, r.Code, r.Details)
			continue
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != uint32(999-i) {
			t.Errorf("%s: %v, want OK with %d remaining", name, &resp, 999-i)
		}
	}
	for name, want := range map[string]struct {
		code    codes.Code
		details string
	}{
		"bad request":       {codes.InvalidArgument, "rate limit domain must not be empty"},
		"bad request, gzip": {codes.InvalidArgument, "rate limit domain must not be empty"},
		"unknown method":    {codes.Unimplemented, ""}, // the text is each server's own
		"deadline passed":   {codes.DeadlineExceeded, ""},
	} {
		r := got[name]
		if r.Code != want.code || want.details != "" && r.Details != want.details {
			t.Errorf("%s: %v %q, want %v %q", name, r.Code, r.Details, want.code, want.details)
		}
	}
	for _, name := range []string{"health check", "health check, gzip", "health watch", "health watch, gzip"} {
		r := got[name]
		var resp healthpb.HealthCheckResponse
		if r.Code != codes.OK || len(r.Messages) != 1 || proto.Unmarshal(r.Messages[0], &resp) != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: %v %q %v", name, r.Code, r.Details, &resp)
		}
	}
}

// grpcjsNode finds node and the installed client, or skips loudly (fails
// under SLUICE_REQUIRE_SERVERS=1).
func grpcjsNode(t *testing.T) string {
	t.Helper()
	why := ""
	node, err := exec.LookPath("node")
	if err != nil {
		why = "node is not installed (apt-get install nodejs npm)"
	} else if _, err := os.Stat(filepath.Join(grpcjsDir, "node_modules", "@grpc", "grpc-js", "package.json")); err != nil {
		why = "@grpc/grpc-js is not installed: run `make test-npm` (npm ci in transport/" + grpcjsDir + ")"
	}
	if why != "" {
		msg := "grpc-js client NOT AVAILABLE: " + why
		if testenv.Required() {
			t.Fatalf("%s (%s=1, so this is a failure)", msg, testenv.RequireEnv)
		}
		t.Skipf("%s (set %s=1 to make this a failure)", msg, testenv.RequireEnv)
	}
	return node
}
