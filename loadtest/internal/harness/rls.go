package harness

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial opens a plaintext gRPC connection to a loopback RLS server.
func Dial(addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("harness: dial %s: %w", addr, err)
	}
	return c, nil
}

// Descriptor builds one descriptor from key, value pairs.
func Descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Request builds a request for domain with the given descriptors.
func Request(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// Decide asks client for one decision; over reports an OVER_LIMIT answer.
// It is the body of most scenarios' CallFunc.
func Decide(ctx context.Context, client rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (over bool, err error) {
	resp, err := client.ShouldRateLimit(ctx, req, opts...)
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, nil
}
