package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// The service with CONFIG_TYPE=GRPC_XDS_SOTW: rules come from the management
// server, updates apply, a bad update is NACKed while the rules in use keep
// being enforced, and a restarted server is found again.
func TestServiceFromManagementServer(t *testing.T) {
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	setSnapshot(t, cache, "sluice-test", "v1", rule("rules", "d", 2))
	mg := startMgmt(t, "127.0.0.1:0", cache)

	settings, err := settings.FromEnv(settings.FromMap(map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "DISABLE_STATS": "true",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": mg.addr, "CONFIG_GRPC_XDS_NODE_ID": "sluice-test",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "50ms",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           "50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms",
	}))
	if err != nil {
		t.Fatal(err)
	}
	st := stats.NewStore()
	now := time.Unix(1795313464, 0) // one fixed minute window: no window ends during the test
	// The listeners open only once the first configuration arrived.
	srv := rlsserver.Start(t, server.Options{Settings: settings, Stats: st, Clock: func() time.Time { return now }})
	mg.waitACK("v1")

	conn, err := grpc.NewClient(srv.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	decide := func(value string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	limitOf := func(value string) uint32 {
		return decide(value).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}

	// v1: 2 per minute.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := decide("a").GetOverallCode(); got != want {
			t.Fatalf("v1 request %d: %v, want %v", i+1, got, want)
		}
	}

	// v2: 5 per minute.
	setSnapshot(t, cache, "sluice-test", "v2", rule("rules", "d", 5))
	mg.waitACK("v2")
	if got := limitOf("b"); got != 5 {
		t.Fatalf("after v2 the limit is %d", got)
	}

	// An ACK means the rules are in use: right after each ACK the new limit
	// applies. (An ACK sent when the rules are handed over, before they are
	// loaded, would let a busy machine see the previous rules; rule sets
	// large enough to take a while to load make that gap visible.)
	for rpu := uint32(10); rpu < 13; rpu++ {
		v := fmt.Sprintf("v2.%d", rpu)
		big := rule("rules", "d", rpu)
		for i := 0; i < 3000; i++ {
			big.Descriptors = append(big.Descriptors, &rlsconf.RateLimitDescriptor{Key: "pad", Value: fmt.Sprint(i),
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1}})
		}
		setSnapshot(t, cache, "sluice-test", v, big)
		mg.waitACK(v)
		if got := limitOf("b"); got != rpu {
			t.Fatalf("right after the ACK of %s the limit is %d, want %d", v, got, rpu)
		}
	}
	setSnapshot(t, cache, "sluice-test", "v2", rule("rules", "d", 5))
	mg.waitACK("v2")

	// A resource that does not unmarshal, then one that does not validate:
	// both NACKed, the v2 rules still enforced, the second counted as a failed load.
	loadErrors := st.CounterValue("ratelimit.service.config_load_error")
	setSnapshot(t, cache, "sluice-test", "v3", badResource)
	mg.waitNACK("invalid UTF-8")
	if got := limitOf("c"); got != 5 {
		t.Fatalf("after a NACKed update the limit is %d", got)
	}
	setSnapshot(t, cache, "sluice-test", "v4", rule("rules", "d", 5), rule("again", "d", 1))
	mg.waitNACK("duplicate domain 'd' in config file")
	if got := st.CounterValue("ratelimit.service.config_load_error"); got != loadErrors+1 {
		t.Errorf("config_load_error %d, want %d", got, loadErrors+1)
	}
	if got := limitOf("c"); got != 5 {
		t.Fatalf("after a rejected update the limit is %d", got)
	}
	for i := 0; i < 5; i++ {
		decide("e")
	}
	if got := decide("e").GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6th request under the v2 limit of 5: %v", got)
	}

	// The management server restarts with new rules.
	mg.stop()
	setSnapshot(t, cache, "sluice-test", "v5", rule("rules", "d", 7))
	mg2 := startMgmt(t, mg.addr, cache)
	mg2.waitACK("v5")
	if got := limitOf("f"); got != 7 {
		t.Fatalf("after the restart the limit is %d", got)
	}
	if got := st.CounterValue("ratelimit.service.config_load_success"); got != 7 {
		t.Errorf("config_load_success %d, want 7 (v1, v2, 3 updates, v2 again, v5)", got)
	}
}
