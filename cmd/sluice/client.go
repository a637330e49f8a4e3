package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sluicehq/sluice/internal/tlsclient"
	"github.com/sluicehq/sluice/settings"
)

// descriptorsFlag collects repeated -descriptors k=v,k2=v2.
type descriptorsFlag []*ratelimitv3.RateLimitDescriptor

// String is the reference client's rendering, which it prints with its flags.
func (d *descriptorsFlag) String() string {
	var b strings.Builder
	for _, desc := range *d {
		var entries strings.Builder
		for _, e := range desc.Entries {
			fmt.Fprintf(&entries, " <key=%s, value=%s> ", e.Key, e.Value)
		}
		fmt.Fprintf(&b, "[%s] ", entries.String())
	}
	return b.String()
}

func (d *descriptorsFlag) Set(s string) error {
	desc := &ratelimitv3.RateLimitDescriptor{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return fmt.Errorf("descriptor entry %q is not name=value", pair)
		}
		desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	*d = append(*d, desc)
	return nil
}

// runClient is the reference's client_cmd: the same flags, the same lines on
// standard output ("Flag: --name=value" for every flag, then "response: …",
// or "error connecting: …" / "request error: …" and exit status 1).
func runClient(args []string) error {
	fs := newFlagSet("client", "client -dial_string HOST:PORT -domain DOMAIN -descriptors KEY=VALUE[,KEY=VALUE...]")
	dial := fs.String("dial_string", "localhost:8081", "url of ratelimit server in <host>:<port> form")
	domain := fs.String("domain", "", "rate limit configuration domain to query")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer (sluice only)")
	var descs descriptorsFlag
	fs.Var(&descs, "descriptors", "descriptor list to query in <key>=<value>,<key>=<value>,... form; may be repeated")
	oltp := fs.String("oltp-protocol", "", "protocol to use when exporting tracing spans: http, grpc or empty (no tracing); the endpoint comes from the OTEL_EXPORTER_OTLP_* variables")
	caFile := fs.String("grpc-server-ca-file", "", "path to the server CA file for TLS connection")
	useTLS := fs.Bool("grpc-use-tls", false, "Use TLS for connection to server")
	certFile := fs.String("grpc-cert-file", "", "path to the client cert file for TLS connection")
	keyFile := fs.String("grpc-key-file", "", "path to the client key for TLS connection")
	if err := parseFlags(fs, args); err != nil {
		return err // a bad flag exits 2: the flag package has said what is wrong, as the reference's does
	}
	fs.VisitAll(func(f *flag.Flag) { fmt.Printf("Flag: --%s=%q\n", f.Name, f.Value) })

	var opts []grpc.DialOption
	if *oltp != "" {
		if *oltp != "http" && *oltp != "grpc" {
			fmt.Printf("Invalid otlptrace client protocol: %s", *oltp)
			return exitCode(2) // the reference panics here
		}
		ts, err := settings.FromEnv(os.LookupEnv)
		if err != nil {
			return err
		}
		t := ts.Tracing
		t.Enabled, t.Protocol, t.ServiceName, t.SamplingRate = true, *oltp, "RateLimitClient", 1
		tr, err := newTracing(t)
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tr.Shutdown(ctx)
		}()
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tr.TracerProvider()), otelgrpc.WithPropagators(tr.Propagator()))))
	}
	if *useTLS {
		cfg, err := tlsclient.Config(*caFile, *certFile, *keyFile, false)
		if err != nil {
			fmt.Printf("error connecting: %s\n", err)
			return exitCode(1)
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	conn, err := grpc.NewClient(*dial, opts...)
	if err != nil {
		fmt.Printf("error connecting: %s\n", err)
		return exitCode(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// The reference's client always sends hits_addend 1.
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
		&rlsv3.RateLimitRequest{Domain: *domain, Descriptors: descs, HitsAddend: 1})
	if err != nil {
		fmt.Printf("request error: %s\n", err)
		return exitCode(1)
	}
	fmt.Printf("response: %s\n", prototext.MarshalOptions{}.Format(resp))
	return nil
}
