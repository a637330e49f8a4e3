package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

const rlqsEnvoy = "compose/envoy-rlqs.yaml"

// rlqsFilter returns the rate_limit_quota filter's configuration of b and
// the Any that holds it (to break a copy in place).
func rlqsFilter(t *testing.T, b *bootstrapv3.Bootstrap) (*rlqsfilterv3.RateLimitQuotaFilterConfig, *anypb.Any) {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					c := &rlqsfilterv3.RateLimitQuotaFilterConfig{}
					if hf.GetTypedConfig().UnmarshalTo(c) == nil {
						return c, hf.GetTypedConfig()
					}
				}
			}
		}
	}
	t.Fatalf("%s has no rate_limit_quota filter", rlqsEnvoy)
	return nil, nil
}

// bucketSettings are the RateLimitQuotaBucketSettings of every action of
// a matcher list (and its on_no_match).
func bucketSettings(t *testing.T, m *xdsmatcherv3.Matcher) []*rlqsfilterv3.RateLimitQuotaBucketSettings {
	t.Helper()
	var onMatch []*xdsmatcherv3.Matcher_OnMatch
	for _, fm := range m.GetMatcherList().GetMatchers() {
		onMatch = append(onMatch, fm.GetOnMatch())
	}
	if m.GetMatcherTree() != nil {
		t.Fatal("bucket_matchers uses a matcher tree; this test reads matcher lists only")
	}
	if m.GetOnNoMatch() != nil {
		onMatch = append(onMatch, m.GetOnNoMatch())
	}
	var out []*rlqsfilterv3.RateLimitQuotaBucketSettings
	for _, om := range onMatch {
		if om.GetMatcher() != nil {
			out = append(out, bucketSettings(t, om.GetMatcher())...)
			continue
		}
		s := &rlqsfilterv3.RateLimitQuotaBucketSettings{}
		if err := om.GetAction().GetTypedConfig().UnmarshalTo(s); err != nil {
			t.Fatalf("matcher action %q is not RateLimitQuotaBucketSettings: %v", om.GetAction().GetName(), err)
		}
		out = append(out, s)
	}
	return out
}

// exampleRules reads the domain and top-level descriptor keys of the rule
// files the compose sluice mounts.
func exampleRules(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../examples/runtime/ratelimit/config/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example rules: %v", err)
	}
	out := map[string][]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Domain      string `yaml:"domain"`
			Descriptors []struct {
				Key string `yaml:"key"`
			} `yaml:"descriptors"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, d := range doc.Descriptors {
			out[doc.Domain] = append(out[doc.Domain], d.Key)
		}
	}
	return out
}

func TestEnvoyRLQSConfigValidates(t *testing.T) {
	b := loadEnvoyFile(t, rlqsEnvoy)
	for _, err := range validateAll(b, "bootstrap") {
		t.Error(err)
	}
	filter, _ := rlqsFilter(t, b)
	keys, ok := exampleRules(t)[filter.GetDomain()]
	if !ok {
		t.Errorf("the filter's domain %q is not a domain of the example rules", filter.GetDomain())
	}
	settings := bucketSettings(t, filter.GetBucketMatchers())
	if len(settings) == 0 {
		t.Fatal("bucket_matchers has no action")
	}
	for i, s := range settings {
		if s.GetReportingInterval() == nil || s.GetNoAssignmentBehavior() == nil || s.GetExpiredAssignmentBehavior() == nil {
			t.Errorf("bucket settings %d: reporting_interval, no_assignment_behavior and expired_assignment_behavior must all be set: %v", i, s)
		}
		// Envoy does not implement reuse_last_assignment: an expired
		// assignment without a fallback_rate_limit falls to
		// no_assignment_behavior (ALLOW_ALL in the example).
		if s.GetExpiredAssignmentBehavior() != nil && s.GetExpiredAssignmentBehavior().GetFallbackRateLimit() == nil {
			t.Errorf("bucket settings %d: expired_assignment_behavior must be a fallback_rate_limit (reuse_last_assignment is not implemented by Envoy): %v", i, s.GetExpiredAssignmentBehavior())
		}
		ids := s.GetBucketIdBuilder().GetBucketIdBuilder()
		if len(ids) == 0 {
			t.Errorf("bucket settings %d build no BucketId (its requests would not be reported)", i)
		}
		for k, v := range ids {
			if !slices.Contains(keys, k) {
				t.Errorf("bucket settings %d: BucketId key %q is not a descriptor key of domain %q (%v)", i, k, filter.GetDomain(), keys)
			}
			in := &matcherv3.HttpRequestHeaderMatchInput{}
			if v.GetStringValue() == "" && v.GetCustomValue().GetTypedConfig().UnmarshalTo(in) != nil {
				t.Errorf("bucket settings %d: the value of %q is neither a string nor a request header", i, k)
			}
		}
	}
	checkRLQSCluster(t, b, filter)

	// A check that cannot fail is a defect: broken copies must be refused,
	// the filter's own fields and those inside the matcher tree's Anys.
	bad := proto.Clone(filter).(*rlqsfilterv3.RateLimitQuotaFilterConfig)
	bad.Domain = ""
	if len(validateAll(bad, "rate_limit_quota")) == 0 {
		t.Error("validation accepted a rate_limit_quota filter without a domain")
	}
	raw, err := os.ReadFile(rlqsEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, from, to string }{
		// inside a matcher action's typed_config, two Anys deep
		{"a bucket's reporting_interval of 50ms (Envoy wants more than 100ms)", "reporting_interval: 1s", "reporting_interval: 0.05s"},
		{"a misspelt field of the bucket settings", "no_assignment_behavior:", "no_assignment_behaviour:"},
		{"a fallback token bucket with a zero fill interval", "fill_interval: 1s", "fill_interval: 0s"},
		{"a header input with a newline in its name", `header_name: ":path"`, `header_name: "a\nb"`},
		{"an unknown matcher input type", "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput", "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInputs"},
	} {
		broken := strings.Replace(string(raw), c.from, c.to, 1)
		if broken == string(raw) {
			t.Fatalf("%s: %q not found in %s", c.what, c.from, rlqsEnvoy)
		}
		if b, err := parseEnvoy([]byte(broken)); err == nil && len(validateAll(b, "bootstrap")) == 0 {
			t.Errorf("validation accepted %s", c.what)
		}
	}
}

// checkRLQSCluster: the filter's server is the bootstrap's sluice cluster,
// HTTP/2 to the compose sluice's gRPC port, and compose runs this Envoy.
func checkRLQSCluster(t *testing.T, b *bootstrapv3.Bootstrap, filter *rlqsfilterv3.RateLimitQuotaFilterConfig) {
	t.Helper()
	name := filter.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	svcs := loadCompose(t)
	grpcPort := svcs["sluice"].Environment["GRPC_PORT"]
	if grpcPort == "" {
		grpcPort = "8081"
	}
	found := false
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != name {
			continue
		}
		found = true
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != "sluice" || fmt.Sprint(sa.GetPortValue()) != grpcPort {
			t.Errorf("the RLQS cluster %q points at %s:%d, want sluice:%s", name, sa.GetAddress(), sa.GetPortValue(), grpcPort)
		}
		if len(c.GetTypedExtensionProtocolOptions()) == 0 {
			t.Errorf("the RLQS cluster %q does not speak HTTP/2 (gRPC needs it)", name)
		}
	}
	if !found {
		t.Errorf("rlqs_server names cluster %q, which %s does not define", name, rlqsEnvoy)
	}
	svc, ok := svcs["envoy-rlqs"]
	if !ok {
		t.Fatal("docker-compose.yaml has no envoy-rlqs service")
	}
	if p := hostPath(t, svc, "/etc/envoy/envoy.yaml"); p != filepath.Clean(rlqsEnvoy) {
		t.Errorf("envoy-rlqs mounts %s as its config, want %s", p, rlqsEnvoy)
	}
	if !publishes(svc, "10001") {
		t.Errorf("envoy-rlqs does not publish 10001: %v", svc.Ports)
	}
}
