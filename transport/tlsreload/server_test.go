package tlsreload_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// The service with GRPC_SERVER_USE_TLS and mutual TLS: a client with the
// certificate gets decisions, one without does not, HTTP stays plain.
func TestServiceMutualTLS(t *testing.T) {
	for _, name := range []string{settings.GRPCServerNative, settings.GRPCServerGRPCGo} {
		t.Run(name, func(t *testing.T) { serviceMutualTLS(t, name) })
	}
}

func serviceMutualTLS(t *testing.T, grpcServer string) {
	root := t.TempDir()
	dir := filepath.Join(root, "app", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	ca, cert, key := testenv.GenerateTLS(t, filepath.Join(root, "tls"), "client.mesh")
	env := map[string]string{
		"BACKEND_TYPE": "memory", "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "app",
		"RUNTIME_WATCH_ROOT": "false", "DISABLE_STATS": "true",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key,
		"GRPC_CLIENT_TLS_CACERT": ca, "GRPC_CLIENT_TLS_SAN": "client.mesh", "SLUICE_GRPC_SERVER": grpcServer,
	}
	set, err := settings.FromEnv(settings.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	srv := rlsserver.Start(t, server.Options{Settings: set})

	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(srv.Addrs().GRPC.String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	withCert, err := testenv.ClientTLSConfig(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(withCert); err != nil {
		t.Fatalf("client with certificate: %v", err)
	}
	noCert, err := testenv.ClientTLSConfig(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := call(noCert); err == nil {
		t.Fatal("a client without a certificate got a decision")
	}

	// A broken certificate at startup is a startup error.
	env["GRPC_SERVER_TLS_CERT"] = ca + ".missing"
	bad, err := settings.FromEnv(settings.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.NewServer(context.Background(), server.Options{Settings: bad}); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("missing certificate: %v", err)
	}
}
