package transport_test

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

const quotaRules = `domain: q
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: user
    value: free
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
`

func usage(bucket map[string]string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket},
		TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// TestQuotaStreamAssigns: a subscription gets a token bucket within the
// rule's limit; a zero limit DENY_ALL, an unlimited rule ALLOW_ALL.
func TestQuotaStreamAssigns(t *testing.T) {
	for _, server := range []string{"grpc-go"} {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server}, map[string]string{"q.yaml": quotaRules}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			stream, err := rlqsv3.NewRateLimitQuotaServiceClient(h.grpcConn(t)).StreamRateLimitQuotas(ctx)
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
			got := map[string]string{}
			for len(got) < 3 {
				resp, err := stream.Recv()
				if err != nil {
					for _, n := range []string{"reports", "assignments", "kept_assignments", "reserve_errors", "lookup_errors", "overcommitted"} {
						t.Logf("%s %d", n, h.stats.CounterValue("ratelimit.rlqs."+n))
					}
					t.Logf("%s", h.logs.String()[max(0, len(h.logs.String())-3000):])
					t.Fatal(err)
				}
				for _, a := range resp.GetBucketAction() {
					got[a.GetBucketId().GetBucket()["user"]] = a.GetQuotaAssignmentAction().GetRateLimitStrategy().String()
					t.Logf("%v", a)
				}
			}
		})
	}
}
