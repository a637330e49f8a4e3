package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testenv"
)

func usage(bucket map[string]string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket},
		TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// TestQuotaStreamAssigns: a subscription gets a token bucket within the
// rule's limit; a zero limit DENY_ALL, an unlimited rule ALLOW_ALL.
func TestQuotaStreamAssigns(t *testing.T) {
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server}, map[string]string{"q.yaml": quotaRules}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			stream, err := rlqsv3.NewRateLimitQuotaServiceClient(h.GRPCConn(t)).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"user": "ann"}, 0, 1, 0),
				usage(map[string]string{"user": "free"}, 0, 1, 0),
				usage(map[string]string{"user": "vip"}, 0, 1, 0),
			}})
			if err != nil {
				t.Fatal(err)
			}
			// A bucket is answered once its share is reserved (the Envoy's
			// no_assignment_behavior applies meanwhile).
			got := map[string]string{}
			for len(got) < 3 || got["ann"] != "token_bucket" {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range resp.GetBucketAction() {
					qa := a.GetQuotaAssignmentAction()
					st := qa.GetRateLimitStrategy()
					desc := st.GetBlanketRule().String()
					if tb := st.GetTokenBucket(); tb != nil {
						if tb.GetMaxTokens()+tb.GetTokensPerFill().GetValue() > 1000 || tb.GetFillInterval().AsDuration() != time.Second {
							t.Errorf("token bucket %v passes 1000/s", tb)
						}
						desc = "token_bucket"
					}
					if qa.GetAssignmentTimeToLive().AsDuration() < time.Second {
						t.Errorf("TTL %v: Envoy reads whole seconds", qa.GetAssignmentTimeToLive().AsDuration())
					}
					got[a.GetBucketId().GetBucket()["user"]] = desc
				}
			}
			if want := map[string]string{"ann": "token_bucket", "free": "DENY_ALL", "vip": "ALLOW_ALL"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestQuotaStreamDrain: on SIGTERM's path an open stream ends UNAVAILABLE
// at once, so that Envoy reconnects to another replica, and the server
// stops without waiting for the stream.
func TestQuotaStreamDrain(t *testing.T) {
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server}, map[string]string{"q.yaml": quotaRules}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stream, err := rlqsv3.NewRateLimitQuotaServiceClient(h.GRPCConn(t)).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"user": "ann"}, 0, 1, 0)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
			stopped := make(chan struct{})
			go func() { h.Stop(t); close(stopped) }()
			for {
				_, err := stream.Recv()
				if err == nil {
					continue
				}
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("stream ended with %v, want UNAVAILABLE", err)
				}
				break
			}
			select {
			case <-stopped:
			case <-time.After(8 * time.Second):
				t.Fatal("the server did not stop within 8s with a quota stream open (its drain grace is 10s)")
			}
		})
	}
}

// TestQuotaStreamBadReport: a report that cannot be taken ends the stream
// with INVALID_ARGUMENT naming what is wrong.
func TestQuotaStreamBadReport(t *testing.T) {
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server}, map[string]string{"q.yaml": quotaRules}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := rlqsv3.NewRateLimitQuotaServiceClient(h.GRPCConn(t)).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"user": "ann"}, 0, 1, 0)}}); err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must name its domain") {
				t.Fatalf("got %v, want INVALID_ARGUMENT about the domain", err)
			}
		})
	}
}

// TestQuotaStreamTLS: with GRPC_SERVER_USE_TLS the quota stream is served
// over TLS, as the RLS is.
func TestQuotaStreamTLS(t *testing.T) {
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			caFile, cert, key := testenv.GenerateTLS(t, t.TempDir())
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server, "GRPC_SERVER_USE_TLS": "true",
				"GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key}, map[string]string{"q.yaml": quotaRules}, nil)
			creds, err := credentials.NewClientTLSFromFile(caFile, "")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(h.GRPC, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"user": "ann"}, 0, 1, 0)}}); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil || resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy() == nil {
				t.Fatalf("over TLS: %v %v", resp, err)
			}
		})
	}
}
