package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
)

func init() {
	registerCommand("client", "ask a rate limit service for one decision over gRPC", runClient)
}

// descriptorsFlag collects repeated -descriptors k=v,k2=v2.
type descriptorsFlag []*ratelimitv3.RateLimitDescriptor

func (d *descriptorsFlag) String() string { return fmt.Sprint(len(*d), " descriptors") }

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

func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	dial := fs.String("dial_string", "localhost:8081", "rate limit service address")
	domain := fs.String("domain", "", "rate limit domain")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	var descs descriptorsFlag
	fs.Var(&descs, "descriptors", "one descriptor as comma-separated name=value pairs; may be repeated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *domain == "" || len(descs) == 0 {
		return errors.New("-domain and at least one -descriptors are required")
	}
	conn, err := grpc.NewClient(*dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing %s: %w", *dial, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// The reference's client always sends hits_addend 1.
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
		&rlsv3.RateLimitRequest{Domain: *domain, Descriptors: descs, HitsAddend: 1})
	if err != nil {
		return fmt.Errorf("request error: %w", err)
	}
	fmt.Printf("response: %s\n", prototext.MarshalOptions{}.Format(resp))
	return nil
}
