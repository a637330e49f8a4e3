package odata_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
)

func TestCORS(t *testing.T) {
	opts := testOptions()
	opts.CORSOrigins = []string{"https://app.example.org"}
	e := newEnv(t, backends()[0], smallData, opts, nil)
	c := newClient(t)
	const allowed, other = "https://app.example.org", "https://evil.example.com"

	// Preflight from an allowed origin.
	r := do(t, c, "OPTIONS", e.base+"/Observations", "Origin", allowed,
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "accept")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != allowed ||
		r.header.Get("Access-Control-Allow-Methods") != "GET, HEAD, OPTIONS" || r.header.Get("Access-Control-Allow-Headers") != "accept" {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	// Preflight from another origin is refused, without CORS headers.
	r = do(t, c, "OPTIONS", e.base+"/Observations", "Origin", other, "Access-Control-Request-Method", "GET")
	if r.status != 403 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign preflight: %d %v", r.status, r.header)
	}
	// A browser GET needs no key; the Link header is readable by scripts.
	r = do(t, c, "GET", e.base+"/Locations?$top=2", "Origin", allowed)
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != allowed || r.header.Get("Access-Control-Expose-Headers") != "Link, Retry-After, OData-Version" {
		t.Fatalf("browser GET: %d %v %s", r.status, r.header, r.body)
	}
	if len(decodePage(t, r.body).rows) != 2 {
		t.Fatal("browser GET: rows missing")
	}
	// Another origin without a key is unauthenticated.
	r = do(t, c, "GET", e.base+"/Locations?$top=2", "Origin", other)
	if r.status != 401 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign GET: %d %v", r.status, r.header)
	}
	// Errors to an allowed origin carry CORS headers too, so scripts can read them.
	r = do(t, c, "GET", e.base+"/Locations?$top=0", "Origin", allowed)
	if r.status != 400 || r.header.Get("Access-Control-Allow-Origin") != allowed {
		t.Fatalf("browser error: %d %v", r.status, r.header)
	}
	// OPTIONS without an Origin is a plain capability answer.
	r = do(t, c, "OPTIONS", e.base+"/Locations")
	if r.status != 204 || r.header.Get("Allow") != "GET, HEAD, OPTIONS" {
		t.Fatalf("OPTIONS: %d %v", r.status, r.header)
	}
}

func TestRateLimitLocal(t *testing.T) {
	clock := testenv.NewClock(time.Unix(1_700_000_000, 250e6))
	lim, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	// No waiting (the clock is simulated): the limiter's answers as they
	// are. Pacing has its own tests.
	opts := testOptions()
	opts.PaceWait = 0
	e := newEnv(t, backends()[0], smallData, opts, lim)
	other, _, _ := e.db.AddKey(context.Background(), "other")
	c := newClient(t)
	url := e.base + "/Locations?$top=1"
	// A token bucket of 2/s holding 4: 4 at once, then 429.
	for i, want := range []int{200, 200, 200, 200, 429, 429} {
		r := e.get(c, url)
		if r.status != want {
			t.Fatalf("request %d at once: %d, want %d", i+1, r.status, want)
		}
		if want == 429 {
			if !strings.HasPrefix(string(r.body), `{"message":"Too Many Requests","errors":[{"status":429,"title":"Too Many Requests","detail":"`) || r.header.Get("Retry-After") != "1" {
				t.Fatalf("429: %s Retry-After %q", r.body, r.header.Get("Retry-After"))
			}
		}
	}
	// Another key has its own budget.
	if r := do(t, c, "GET", url, "x-api-key", other); r.status != 200 {
		t.Fatalf("other key: %d", r.status)
	}
	// A second later two tokens are back, and no more.
	clock.Add(time.Second)
	for i, want := range []int{200, 200, 429} {
		if r := e.get(c, url); r.status != want {
			t.Fatalf("next second, request %d: %d, want %d", i+1, r.status, want)
		}
	}
}

// rlsServer is a real gRPC rate limit service over the engine, the shape
// of sluice's own (transport is not imported by odata).
type rlsServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc *engine.Service
}

func (s *rlsServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	er := &engine.Request{Domain: req.Domain, HitsAddend: req.HitsAddend}
	for _, d := range req.Descriptors {
		var ed engine.Descriptor
		for _, en := range d.Entries {
			ed.Entries = append(ed.Entries, engine.Entry{Key: en.Key, Value: en.Value})
		}
		er.Descriptors = append(er.Descriptors, ed)
	}
	resp, err := s.svc.ShouldRateLimit(ctx, er)
	if err != nil {
		return nil, err
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(resp.OverallCode)}
	for _, st := range resp.Statuses {
		out.Statuses = append(out.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_Code(st.Code),
			DurationUntilReset: durationpb.New(st.DurationUntilReset),
		})
	}
	return out, nil
}

func TestRateLimitRemote(t *testing.T) {
	clock := testenv.NewClock(time.Unix(1_700_000_000, 0))
	// The remote service's own engine, configured with the odata rule.
	local, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: 3, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, &rlsServer{svc: odata.LocalLimiterService(local)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()

	remote, err := odata.NewRemoteLimiter(odata.RemoteLimiterOptions{Target: ln.Addr().String(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	// Refused at once (PaceWait 0): the service's clock stands still, so a
	// paced request would wait out the whole PaceWait (10 s) for a token
	// that cannot come; the decisions, not the pacing, are tested here.
	remoteOpts := testOptions()
	remoteOpts.PaceWait = 0
	e := newEnv(t, backends()[0], smallData, remoteOpts, remote)
	c := newClient(t)
	for i, want := range []int{200, 200, 200, 200, 429} {
		if r := e.get(c, e.base+"/Metadata?$top=1"); r.status != want {
			t.Fatalf("request %d: %d, want %d", i+1, r.status, want)
		}
	}
	clock.Add(time.Second)
	if r := e.get(c, e.base+"/Metadata?$top=1"); r.status != 200 {
		t.Fatalf("next second: %d", r.status)
	}

	// Descriptor shape: domain odata, [api_key=<caller>].
	cl := rlsv3.NewRateLimitServiceClient(mustDial(t, ln.Addr().String()))
	resp, err := cl.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "odata",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "x"}}}}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil && resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("direct call: %v %v", resp, err)
	}

	// An unreachable service: fail open by default, 503 when configured.
	gs.Stop()
	if r := e.get(c, e.base+"/Metadata?$top=1"); r.status != 200 {
		t.Fatalf("fail open: %d %s", r.status, r.body)
	}
	opts := remoteOpts
	opts.FailOpen = false
	_, base := startServer(t, e.db, opts, remote)
	if r := do(t, c, "GET", base+"/Metadata?$top=1", "x-api-key", e.key); r.status != 503 {
		t.Fatalf("fail closed: %d %s", r.status, r.body)
	}
}

func mustDial(t *testing.T, target string) *grpc.ClientConn {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// No request while another of the same caller is in flight: without a
// wait, the second gets 429 while the first one's body is still being
// read, and succeeds once it is done.
func TestSequentialPerKey(t *testing.T) {
	opts := testOptions()
	opts.Sequential = true
	opts.PaceWait = 0
	e := newEnv(t, backends()[0], gen12k, opts, nil)
	other, _, _ := e.db.AddKey(context.Background(), "other")
	c := newClient(t)

	sr := openSlowRead(t, e.base+"/Records?$top=10000", e.key)
	defer sr.close()
	if sr.resp.StatusCode != 200 {
		t.Fatalf("first request: %d", sr.resp.StatusCode)
	}
	r := e.get(c, e.base+"/Locations?$top=1")
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("parallel request: %d %v", r.status, r.header)
	}
	if r := do(t, c, "GET", e.base+"/Locations?$top=1", "x-api-key", other); r.status != 200 {
		t.Fatalf("other key during the stream: %d", r.status)
	}
	n := sr.drain(t)
	if n < 10000 {
		t.Fatalf("body of %d bytes", n)
	}
	// The turn is released once the body is done (its writer returns a
	// moment after the last byte): retry on 429 within a bound.
	var st int
	for i := 0; i < 200; i++ {
		if st = e.get(c, e.base+"/Locations?$top=1").status; st != 429 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st != 200 {
		t.Fatalf("after the stream: %d", st)
	}
}

// remoteEngine is a remote sluice's engine: memory counters and the rule
// file RateLimitConfigYAML, loaded as sluice loads its configuration files.
func remoteEngine(t *testing.T, clock *testenv.Clock) *engine.Service {
	t.Helper()
	o := engine.DefaultOptions()
	o.Counter = engine.DirectCounter{Backend: memory.New(clock.Now)}
	o.Clock = clock.Now
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	rule := odata.RateLimitConfigYAML(odata.DefaultLocalLimiterOptions())
	cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "odata.yaml", YAML: []byte(rule)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	return svc
}
