package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		// fasthttp (the OData API) refreshes its Date header from one
		// process-wide goroutine it never stops, and a stopped server's
		// worker-pool cleaner ends by itself after its idle sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// ---- Envoy -----------------------------------------------------------------

// loadEnvoy reads compose/envoy.yaml into the bootstrap proto the way Envoy
// does: YAML as JSON, with every typed_config resolved by its @type.
func loadEnvoy(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	return loadEnvoyFile(t, "compose/envoy.yaml")
}

func loadEnvoyFile(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseEnvoy(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func parseEnvoy(raw []byte) (*bootstrapv3.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("as JSON: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil { // unknown fields are errors
		return nil, fmt.Errorf("not a v3 Bootstrap: %w", err)
	}
	return b, nil
}

// validateAll runs the generated validation (protoc-gen-validate rules) on m
// and, since ValidateAll does not look inside Any, on every typed_config
// nested in it.
func validateAll(m proto.Message, path string) []error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	var walk func(protoreflect.Message, string)
	walk = func(msg protoreflect.Message, p string) {
		if a, ok := msg.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				return
			}
			errs = append(errs, validateAll(inner, p+"("+a.GetTypeUrl()+")")...)
			return
		}
		msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			fp := p + "." + string(fd.Name())
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", fp, i))
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), fmt.Sprintf("%s[%v]", fp, k.Interface()))
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message(), fp)
			}
			return true
		})
	}
	walk(m.ProtoReflect(), path)
	return errs
}

func TestEnvoyConfigValidates(t *testing.T) {
	b := loadEnvoy(t)
	for _, err := range validateAll(b, "bootstrap") {
		t.Error(err)
	}
	// A check that cannot fail is a defect: a broken copy must be refused.
	broken := proto.Clone(b).(*bootstrapv3.Bootstrap)
	broken.StaticResources.Clusters[0].ConnectTimeout.Seconds = -1
	if len(validateAll(broken, "bootstrap")) == 0 {
		t.Error("validation accepted a negative connect_timeout")
	}
	_, filter := envoyRoute(t, b)
	bad := proto.Clone(filter).(*ratelimitfilterv3.RateLimit)
	bad.Domain = ""
	if len(validateAll(bad, "ratelimit")) == 0 {
		t.Error("validation accepted a rate limit filter without a domain")
	}
}

// envoyRoute returns the ingress route (the one with rate limits) and the
// rate limit filter's configuration.
func envoyRoute(t *testing.T, b *bootstrapv3.Bootstrap) (*routev3.RouteAction, *ratelimitfilterv3.RateLimit) {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					continue
				}
				var rl *ratelimitfilterv3.RateLimit
				for _, hf := range hcm.GetHttpFilters() {
					c := &ratelimitfilterv3.RateLimit{}
					if hf.GetTypedConfig().UnmarshalTo(c) == nil {
						rl = c
					}
				}
				if rl == nil {
					continue
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if len(r.GetRoute().GetRateLimits()) > 0 {
							return r.GetRoute(), rl
						}
					}
				}
			}
		}
	}
	t.Fatal("envoy.yaml has no listener with the rate limit filter and a route with rate_limits")
	return nil, nil
}

// envoyDescriptors are the descriptors Envoy sends for a request with these
// headers (":path" included): one per rate_limits entry whose actions all
// produce an entry. Only the actions envoy.yaml uses are known here; any
// other fails the test rather than being guessed.
func envoyDescriptors(t *testing.T, route *routev3.RouteAction, headers map[string]string) []*ratelimitv3.RateLimitDescriptor {
	t.Helper()
	var out []*ratelimitv3.RateLimitDescriptor
	for _, rl := range route.GetRateLimits() {
		d := &ratelimitv3.RateLimitDescriptor{}
		complete := true
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRequestHeaders() != nil:
				rh := a.GetRequestHeaders()
				v, ok := headers[strings.ToLower(rh.GetHeaderName())]
				if !ok {
					if !rh.GetSkipIfAbsent() {
						complete = false
					}
					continue
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: rh.GetDescriptorKey(), Value: v})
			case a.GetGenericKey() != nil:
				key := a.GetGenericKey().GetDescriptorKey()
				if key == "" {
					key = "generic_key"
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: a.GetGenericKey().GetDescriptorValue()})
			default:
				t.Fatalf("envoy.yaml uses an action this test does not model: %v", a)
			}
		}
		if complete && len(d.Entries) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// ---- docker-compose --------------------------------------------------------

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Build       map[string]string `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Healthcheck map[string]any    `yaml:"healthcheck"`
	DependsOn   map[string]any    `yaml:"depends_on"`
}

func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	f, err := os.Open("compose/docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc struct {
		Name     string                    `yaml:"name"`
		Services map[string]composeService `yaml:"services"`
	}
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	for _, name := range []string{"redis", "sluice", "envoy"} {
		if _, ok := doc.Services[name]; !ok {
			t.Fatalf("docker-compose.yaml has no %s service", name)
		}
	}
	return doc.Services
}

// hostPath maps a container path to the host directory a bind mount of the
// service puts there (relative mounts are relative to compose/).
func hostPath(t *testing.T, svc composeService, container string) string {
	t.Helper()
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		if rel, err := filepath.Rel(parts[1], container); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join("compose", parts[0], rel)
		}
	}
	t.Fatalf("no volume of the service holds %s: %v", container, svc.Volumes)
	return ""
}

func publishes(svc composeService, port string) bool {
	for _, p := range svc.Ports {
		if strings.HasSuffix(strings.Fields(p)[0], ":"+port) {
			return true
		}
	}
	return false
}

// The pieces of the compose file agree with each other: Envoy's sluice
// cluster is the sluice service's gRPC port, which is published, and sluice's
// Redis is the redis service.
func TestComposeWiring(t *testing.T) {
	svcs := loadCompose(t)
	sl := svcs["sluice"]
	route, _ := envoyRoute(t, loadEnvoy(t))
	if route.GetCluster() == "" {
		t.Error("the rate limited route has no upstream cluster")
	}
	grpcPort := sl.Environment["GRPC_PORT"]
	if grpcPort == "" {
		grpcPort = "8081"
	}
	found := false
	for _, c := range loadEnvoy(t).GetStaticResources().GetClusters() {
		if c.GetName() != "sluice" {
			continue
		}
		found = true
		if c.GetType() != clusterv3.Cluster_STRICT_DNS {
			t.Errorf("sluice cluster type %v, want STRICT_DNS (a compose service name)", c.GetType())
		}
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != "sluice" || fmt.Sprint(sa.GetPortValue()) != grpcPort {
			t.Errorf("envoy's sluice cluster points at %s:%d, want sluice:%s", sa.GetAddress(), sa.GetPortValue(), grpcPort)
		}
		if len(c.GetTypedExtensionProtocolOptions()) == 0 {
			t.Error("the sluice cluster does not speak HTTP/2 (gRPC needs it)")
		}
	}
	if !found {
		t.Error("envoy.yaml has no cluster named sluice")
	}
	if host, _, _ := net.SplitHostPort(sl.Environment["REDIS_URL"]); host != "redis" {
		t.Errorf("REDIS_URL %q is not the redis service", sl.Environment["REDIS_URL"])
	}
	for _, p := range []string{grpcPort, "8080", "9090"} {
		if !publishes(sl, p) {
			t.Errorf("sluice does not publish port %s: %v", p, sl.Ports)
		}
	}
	if !publishes(svcs["envoy"], "10000") {
		t.Errorf("envoy does not publish 10000: %v", svcs["envoy"].Ports)
	}
	if fmt.Sprint(sl.Healthcheck["test"]) != "[CMD /sluice healthcheck]" {
		t.Errorf("sluice health check %v, want the image's /sluice healthcheck", sl.Healthcheck["test"])
	}
}

// ---- a running sluice with the compose settings -------------------------------

// t0 is 4 s into a minute window, so every per-minute and per-second count
// of a test stays in one window.
var t0 = time.Unix(1795313464, 0)

type sluice struct {
	srv     *server.Server
	redis   *testenv.Redis
	grpc    *grpc.ClientConn
	metrics string // scrape URL
	root    string // RUNTIME_ROOT, a copy of the compose file's mounted folder
	subdir  string // RUNTIME_SUBDIRECTORY
}

// startComposeSluice runs sluice with the compose file's environment; only
// what cannot work outside compose changes: listeners on loopback ports,
// REDIS_URL at a local redis-server, RUNTIME_ROOT at the mounted host folder.
func startComposeSluice(t *testing.T) *sluice {
	t.Helper()
	svc := loadCompose(t)["sluice"]
	env := map[string]string{}
	for k, v := range svc.Environment {
		env[k] = v
	}
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	root := env["RUNTIME_ROOT"]
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	// A copy of the mounted folder, so a test may break the rules.
	runtimeRoot := t.TempDir()
	if err := os.CopyFS(runtimeRoot, os.DirFS(hostPath(t, svc, root))); err != nil {
		t.Fatal(err)
	}
	env["RUNTIME_ROOT"] = runtimeRoot
	env["REDIS_URL"] = r.Addr
	for k, v := range map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "PROMETHEUS_ADDR": "127.0.0.1:0"} {
		env[k] = v
	}
	settings, err := settings.FromEnv(settings.FromMap(env))
	if err != nil {
		t.Fatalf("the compose environment: %v", err)
	}
	srv, err := server.NewServer(context.Background(), server.Options{Settings: settings,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- srv.Run(ctx, ready) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("sluice stopped: %v", err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("sluice did not start")
	}
	conn, err := grpc.NewClient(srv.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sluice: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	s := &sluice{srv: srv, redis: r, grpc: conn, root: runtimeRoot, subdir: env["RUNTIME_SUBDIRECTORY"]}
	if a := srv.MetricsAddr(); a != nil {
		s.metrics = "http://" + a.String() + settings.Stats.PullPath
	}
	return s
}

// ---- the requests of docs/deploy.md ------------------------------------------

type readmeRequest struct {
	line    string // the curl command as printed
	headers map[string]string
	allowed int // answers 200 before the first 429; -1: always 200
	then    int // the answer after them (429), 0 when always 200
}

var (
	curlHeader = regexp.MustCompile(`-H '([^:']+): ([^']*)'`)
	curlURL    = regexp.MustCompile(`localhost:10000(/\S*)`)
	answers    = regexp.MustCompile(`^(?:(\d+) × 200, then (\d{3})|(200|429))$`)
)

// readmeRequests reads the table of docs/deploy.md that says
// what Envoy answers: | `curl … localhost:10000/…` | 5 × 200, then 429 |.
func readmeRequests(t *testing.T) []readmeRequest {
	t.Helper()
	raw, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeRequest
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "localhost:10000") {
			continue
		}
		cmd := strings.Trim(strings.TrimSpace(cells[1]), "`")
		u := curlURL.FindStringSubmatch(cmd)
		a := answers.FindStringSubmatch(strings.TrimSpace(cells[2]))
		if u == nil || a == nil {
			t.Fatalf("docs/deploy.md row not understood: %q", line)
		}
		req := readmeRequest{line: cmd, headers: map[string]string{":path": u[1]}}
		for _, h := range curlHeader.FindAllStringSubmatch(cmd, -1) {
			req.headers[strings.ToLower(h[1])] = h[2]
		}
		switch {
		case a[3] == "200":
			req.allowed = -1
		case a[3] == "429":
			req.allowed, req.then = 0, 429
		default:
			req.allowed, _ = strconv.Atoi(a[1])
			req.then, _ = strconv.Atoi(a[2])
		}
		out = append(out, req)
	}
	if len(out) < 4 {
		t.Fatalf("found %d request rows in docs/deploy.md, want at least 4", len(out))
	}
	return out
}

// httpStatus is what Envoy's rate limit filter answers for a decision.
func httpStatus(resp *rlsv3.RateLimitResponse) int {
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		return 429
	}
	return 200
}

// TestComposeExample sends, for each request of the table in docs/deploy.md, the
// descriptors Envoy would send to a sluice running with the compose
// settings and rules, and checks the answers it promises. Then it
// checks the dashboard's metrics against that sluice's scrape.
func TestComposeExample(t *testing.T) {
	s := startComposeSluice(t)
	route, filter := envoyRoute(t, loadEnvoy(t))
	c := rlsv3.NewRateLimitServiceClient(s.grpc)
	ctx := context.Background()
	for _, req := range readmeRequests(t) {
		descs := envoyDescriptors(t, route, req.headers)
		n := req.allowed + 1
		if req.allowed < 0 {
			n = 3 // "200": a few requests, all through
		}
		for i := 1; i <= n; i++ {
			resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: filter.GetDomain(), Descriptors: descs})
			if err != nil {
				t.Fatalf("%s (request %d): %v", req.line, i, err)
			}
			want := 200
			if req.allowed >= 0 && i > req.allowed {
				want = req.then
			}
			if got := httpStatus(resp); got != want {
				t.Fatalf("%s: request %d answered %d, docs/deploy.md says %d (descriptors %v, response %v)", req.line, i, got, want, descs, resp)
			}
		}
	}

	t.Run("dashboard metrics exist", func(t *testing.T) {
		if s.metrics == "" {
			t.Fatal("the compose settings do not turn pull metrics on")
		}
		// Backend errors appear once there is one: Redis down, one decision.
		s.redis.Kill()
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: filter.GetDomain(),
			Descriptors: envoyDescriptors(t, route, map[string]string{":path": "/", "x-user": "redis-down"})})
		if err == nil {
			t.Fatal("a decision succeeded with Redis down")
		}
		// Configuration load errors too: a broken rule file, reloaded.
		bad := filepath.Join(s.root, s.subdir, "config", "broken.yaml")
		if err := os.WriteFile(bad, []byte("domain: broken\ndescriptors:\n  - {key: a, rate_limit: {unit: eon, requests_per_unit: 1}}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for scrapeFamilies(t, s.metrics)["ratelimit_service_config_load_error"] == nil {
			if time.Now().After(deadline) {
				t.Fatal("a broken rule file was not reported as ratelimit_service_config_load_error")
			}
			time.Sleep(20 * time.Millisecond)
		}
		checkDashboard(t, scrapeFamilies(t, s.metrics), func(title string) bool { return !isOData(title) },
			[][2]string{{"sluice_shard_queue_depth", "sluice_shard_queue_dept"}, {"grpc_method", "grpc_methd"}, {"err_type", "error_type"}})
	})
}
