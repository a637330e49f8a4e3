package xds_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/transport/xds"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's log throttle (the service's shards) outlives a test by design.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

// mgmt is an in-process go-control-plane management server with a snapshot cache.
type mgmt struct {
	t      *testing.T
	addr   string
	g      *grpc.Server
	wg     sync.WaitGroup
	cancel context.CancelFunc
	reqs   chan *discovery.DiscoveryRequest
	opens  chan metadata.MD
	once   sync.Once
}

func startMgmt(t *testing.T, addr string, cache cachev3.SnapshotCache, opts ...grpc.ServerOption) *mgmt {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &mgmt{t: t, addr: ln.Addr().String(), cancel: cancel,
		reqs: make(chan *discovery.DiscoveryRequest, 1024), opens: make(chan metadata.MD, 64)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			select {
			case m.opens <- md:
			default:
			}
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			select {
			case m.reqs <- r:
			default:
			}
			return nil
		},
	}
	m.g = grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(m.g, serverv3.NewServer(ctx, cache, cb))
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.g.Serve(ln) }()
	t.Cleanup(m.stop)
	return m
}

// stop ends the server as a crash would: streams are cut.
func (m *mgmt) stop() {
	m.once.Do(func() {
		m.g.Stop()
		m.cancel()
		m.wg.Wait()
	})
}

// waitReq returns the first request that pred accepts, within a bounded wait.
func (m *mgmt) waitReq(what string, pred func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	m.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-m.reqs:
			if pred(r) {
				return r
			}
		case <-deadline:
			m.t.Fatalf("management server: no %s", what)
			return nil
		}
	}
}

func (m *mgmt) waitACK(version string) {
	m.t.Helper()
	m.waitReq("ACK of "+version, func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == version && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	})
}

func (m *mgmt) waitNACK(contains string) *discovery.DiscoveryRequest {
	m.t.Helper()
	return m.waitReq("NACK with "+contains, func(r *discovery.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && strings.Contains(r.GetErrorDetail().GetMessage(), contains)
	})
}

func setSnapshot(t *testing.T, cache cachev3.SnapshotCache, node, version string, res ...cachetypes.Resource) {
	t.Helper()
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]cachetypes.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// rule is a config with one rule key=k at rpu per minute.
func rule(name, domain string, rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       "k",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
}

// badResource cannot be unmarshalled as a RateLimitConfig: its field 1 (the
// config's name, a string) is not UTF-8.
var badResource = wrapperspb.Bytes([]byte{0xff, 0xfe})

type delivery struct {
	files []engine.ConfigFile
	err   error
}

func validate(files []engine.ConfigFile) error {
	_, err := engine.LoadConfig(files, engine.ConfigOptions{})
	return err
}

func fastSettings(addr string) xds.Settings {
	s := xds.DefaultSettings()
	s.ServerURL = addr
	s.NodeID = "node-1"
	s.ConnectRetryInterval = 50 * time.Millisecond
	s.BackoffInitial, s.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	return s
}

func TestSourceLoadUpdateNackRestart(t *testing.T) {
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	setSnapshot(t, cache, "node-1", "v1", rule("a", "d1", 2))
	srv := startMgmt(t, "127.0.0.1:0", cache)

	s := fastSettings(srv.addr)
	s.NodeMetadata = map[string]string{"zone": "z1"}
	s.Headers = map[string]string{"authorization": "Bearer t0ken"}
	src, err := xds.New(s, xds.Options{Validate: validate})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan delivery, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(files []engine.ConfigFile, err error) bool {
			select {
			case got <- delivery{files, err}:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	}()
	next := func(what string) delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("no delivery: %s", what)
			return delivery{}
		}
	}
	domains := func(d delivery) string {
		var out []string
		for _, f := range d.files {
			out = append(out, f.Name+"="+f.Domain.Domain)
		}
		return strings.Join(out, ",")
	}

	// The first request subscribes by wildcard, with the node and the headers.
	first := srv.waitReq("first request", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if first.GetTypeUrl() != xds.TypeURL || len(first.GetResourceNames()) != 0 || first.GetNode().GetId() != "node-1" ||
		first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "z1" {
		t.Fatalf("first request %v", first)
	}
	select {
	case md := <-srv.opens:
		if v := md.Get("authorization"); len(v) != 1 || v[0] != "Bearer t0ken" {
			t.Errorf("stream headers %v", md)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no stream opened")
	}

	// First load, then ACK.
	d := next("v1")
	if d.err != nil || domains(d) != "a=d1" || d.files[0].Domain.Descriptors[0].RateLimit.Unit != "MINUTE" {
		t.Fatalf("v1: %+v", d)
	}
	srv.waitACK("v1")

	// Update: every resource, in name order.
	setSnapshot(t, cache, "node-1", "v2", rule("b", "d2", 1), rule("a", "d1", 5))
	if d := next("v2"); d.err != nil || domains(d) != "a=d1,b=d2" || d.files[0].Domain.Descriptors[0].RateLimit.RequestsPerUnit != 5 {
		t.Fatalf("v2: %+v", d)
	}
	srv.waitACK("v2")

	// A resource that does not unmarshal: NACK naming the error, nothing delivered.
	setSnapshot(t, cache, "node-1", "v3", rule("a", "d1", 5), badResource)
	if r := srv.waitNACK("invalid UTF-8"); r.GetVersionInfo() != "v2" {
		t.Errorf("NACK version %q, want the last accepted v2", r.GetVersionInfo())
	}

	// A config that fails validation: delivered as an error (the service
	// counts it), and NACKed with the loader's message.
	setSnapshot(t, cache, "node-1", "v4", &rlsconf.RateLimitConfig{Name: "c", Domain: ""})
	if d := next("v4"); d.err == nil || d.err.Error() != "c: config file cannot have empty domain" || d.files != nil {
		t.Fatalf("v4: %+v", d)
	}
	srv.waitNACK("c: config file cannot have empty domain")

	setSnapshot(t, cache, "node-1", "v5", rule("a", "d1", 7))
	if d := next("v5"); d.err != nil || domains(d) != "a=d1" {
		t.Fatalf("v5: %+v", d)
	}
	srv.waitACK("v5")

	// The server goes away and comes back on the same address.
	srv.stop()
	setSnapshot(t, cache, "node-1", "v6", rule("z", "d9", 9))
	srv2 := startMgmt(t, srv.addr, cache)
	if d := next("v6 after restart"); d.err != nil || domains(d) != "z=d9" {
		t.Fatalf("v6: %+v", d)
	}
	srv2.waitACK("v6")
}

// A server that is not there yet is retried until it is.
func TestSourceWaitsForServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	src, err := xds.New(fastSettings(addr), xds.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []engine.ConfigFile, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(files []engine.ConfigFile, _ error) bool { got <- files; return true })
	}()
	defer func() { cancel(); <-done }()

	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	setSnapshot(t, cache, "node-1", "v1", rule("a", "d1", 2))
	startMgmt(t, addr, cache)
	select {
	case files := <-got:
		if len(files) != 1 || files[0].Domain.Domain != "d1" {
			t.Fatalf("files %+v", files)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never connected")
	}
}

func TestConvert(t *testing.T) {
	c := &rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "a", Value: "x", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "r1",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "r0"}}},
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "b", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}},
		{Key: "w", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit(7), RequestsPerUnit: 1}},
		{Key: "bad", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit(42), RequestsPerUnit: 1}},
	}}
	dc := xds.ToDomainConfig(c)
	a := dc.Descriptors[0]
	if dc.Domain != "d" || a.Key != "a" || a.Value != "x" || !a.ShadowMode || !a.DetailedMetric ||
		a.RateLimit.Unit != "HOUR" || a.RateLimit.RequestsPerUnit != 3 || a.RateLimit.Name != "r1" ||
		len(a.RateLimit.Replaces) != 1 || a.RateLimit.Replaces[0].Name != "r0" ||
		!a.Descriptors[0].RateLimit.Unlimited || a.Descriptors[0].RateLimit.Unit != "UNKNOWN" {
		t.Fatalf("%+v", dc)
	}
	if u := dc.Descriptors[1].RateLimit.Unit; u != "WEEK" {
		t.Errorf("unit 7 = %q, want WEEK (the reference's enum)", u)
	}
	// The same checks as YAML: an unknown unit is refused with the reference's message.
	_, err := engine.LoadConfig([]engine.ConfigFile{{Name: "n", Domain: &dc}}, engine.ConfigOptions{})
	if err == nil || err.Error() != "n: invalid rate limit unit 'UNKNOWN'" {
		t.Errorf("load: %v", err)
	}
	dc.Descriptors = dc.Descriptors[:2]
	if _, err := engine.LoadConfig([]engine.ConfigFile{{Name: "n", Domain: &dc}}, engine.ConfigOptions{}); err != nil {
		t.Errorf("load: %v", err)
	}
}

func TestSettings(t *testing.T) {
	ok := xds.DefaultSettings()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*xds.Settings)
		want string
	}{
		{"no url", func(s *xds.Settings) { s.ServerURL = "" }, "SERVER_URL"},
		{"retry", func(s *xds.Settings) { s.ConnectRetryInterval = 0 }, "CONNECT_RETRY_INTERVAL"},
		{"backoff order", func(s *xds.Settings) { s.BackoffMax = time.Second }, "BACKOFF_INITIAL_INTERVAL"},
		{"factor", func(s *xds.Settings) { s.BackoffRandomFactor = 2 }, "RANDOM_FACTOR"},
		{"cert without key", func(s *xds.Settings) { s.UseTLS, s.ClientCertFile = true, "c" }, "go together"},
		{"tls files without tls", func(s *xds.Settings) { s.ServerCAFile = "ca" }, "USE_TLS"},
		{"msg size", func(s *xds.Settings) { s.MaxRecvMsgSize = -1 }, "MAX_MSG_SIZE"},
	} {
		s := xds.DefaultSettings()
		tc.mod(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestParseNodeMetadata(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", nil, false},
		{"a=1", map[string]string{"a": "1"}, false},
		{"a=1, b = 2 ,", map[string]string{"a": "1", "b": "2"}, false},
		{"a=b=c", map[string]string{"a": "b=c"}, false},
		{"a:1", nil, true},
		{"=1", nil, true},
	} {
		got, err := xds.ParseNodeMetadata(tc.in)
		if (err != nil) != tc.err || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v", tc.in, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %v", tc.in, got)
			}
		}
	}
}

func FuzzParseNodeMetadata(f *testing.F) {
	for _, s := range []string{"", "a=1", "a=1,b=2", "=", ",,,", "k=v=w", "a:1", " x = y "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := xds.ParseNodeMetadata(s)
		if err != nil {
			return
		}
		for k := range m {
			if k == "" || strings.TrimSpace(k) != k || strings.Contains(k, ",") || strings.Contains(k, "=") {
				t.Fatalf("%q → bad key %q", s, k)
			}
		}
	})
}

// CONFIG_GRPC_XDS_SERVER_USE_TLS with a private CA, a client certificate the
// server requires, and the SAN to verify.
func TestSourceTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := testenv.GenerateTLS(t, dir, "xds.internal")
	serverTLS, err := testenv.ClientTLSConfig(ca, cert, key) // the same pair serves both ends
	if err != nil {
		t.Fatal(err)
	}
	serverTLS.ClientCAs, serverTLS.RootCAs = serverTLS.RootCAs, nil
	serverTLS.ClientAuth = tls.RequireAndVerifyClientCert
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	setSnapshot(t, cache, "node-1", "v1", rule("a", "d1", 2))
	srv := startMgmt(t, "127.0.0.1:0", cache, grpc.Creds(credentials.NewTLS(serverTLS)))

	for _, tc := range []struct {
		name string
		mod  func(*xds.Settings)
		ok   bool
	}{
		{"CA, SAN and client certificate", func(s *xds.Settings) {}, true},
		{"no client certificate", func(s *xds.Settings) { s.ClientCertFile, s.ClientKeyFile = "", "" }, false},
		{"wrong SAN", func(s *xds.Settings) { s.ServerSAN = "other.internal" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fastSettings(srv.addr)
			s.UseTLS, s.ServerCAFile, s.ServerSAN, s.ClientCertFile, s.ClientKeyFile = true, ca, "xds.internal", cert, key
			tc.mod(&s)
			logs := &syncLog{}
			src, err := xds.New(s, xds.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan []engine.ConfigFile, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- src.Run(ctx, func(files []engine.ConfigFile, _ error) bool {
					select {
					case got <- files:
					default:
					}
					return true
				})
			}()
			defer func() { cancel(); <-done }()
			deadline := time.After(10 * time.Second)
			for {
				select {
				case files := <-got:
					if !tc.ok {
						t.Fatalf("delivered %+v over a connection that should fail", files)
					}
					return
				case <-deadline:
					t.Fatalf("neither a configuration nor a refused stream; log:\n%s", logs.String())
				case <-time.After(10 * time.Millisecond):
					// A refused connection is retried, and each retry is logged
					// with its TLS error; two of them mean it keeps failing.
					if !tc.ok && strings.Count(logs.String(), "no stream to the management server") >= 2 && strings.Contains(logs.String(), "tls:") {
						return
					}
				}
			}
		})
	}
	if _, err := xds.New(func() xds.Settings {
		s := fastSettings(srv.addr)
		s.UseTLS, s.ServerCAFile = true, ca+".missing"
		return s
	}(), xds.Options{}); err == nil {
		t.Error("a missing CA file must fail at startup")
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
