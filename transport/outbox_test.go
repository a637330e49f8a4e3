package transport

import (
	"fmt"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/quota"
)

// TestOutboxSplitsAnswers: what a stream has to send goes out in messages
// under the answer bound (issue 43: one 4.69 MB answer to 100k buckets
// lost a default gRPC client's stream, RESOURCE_EXHAUSTED over 4 MiB),
// every action once and in order, and a newer action for a bucket
// replaces the queued one.
func TestOutboxSplitsAnswers(t *testing.T) {
	for _, c := range []struct {
		name     string
		max, n   int
		messages int // at least
	}{
		{"one fits", 4 << 10, 10, 1},
		{"small bound", 4 << 10, 1000, 10},
		{"the server's bound", maxAnswerBytes, 120_000, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			box := newOutbox(c.max)
			acts := make([]quota.Action, c.n)
			for i := range acts {
				b := alloc.BucketOf(map[string]string{"user": fmt.Sprint("u", i), "tenant": "acme-water-quality"})
				acts[i] = quota.Action{Key: string(b), Bucket: b, TTL: 16 * time.Second,
					Strategy: alloc.Strategy{Kind: alloc.TokenBucket, MaxTokens: 1500, TokensPerFill: 1000, FillInterval: time.Second}}
			}
			box.Push(acts)
			// A newer action for the first bucket replaces the queued one.
			newer := acts[0]
			newer.Strategy.TokensPerFill = 7
			box.Push([]quota.Action{newer})

			var got []string
			var sizes []int
			_, err := box.flush(func(as []quota.Action) error {
				var b []byte
				for i := range as {
					b = appendAction(b, &as[i])
				}
				var resp rlqsv3.RateLimitQuotaResponse
				if err := proto.Unmarshal(b, &resp); err != nil {
					return err
				}
				sizes = append(sizes, len(b))
				for _, a := range resp.GetBucketAction() {
					got = append(got, a.GetBucketId().GetBucket()["user"])
					if a.GetBucketId().GetBucket()["user"] == "u0" {
						if tpf := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue(); tpf != 7 {
							t.Errorf("u0 sent with %d tokens per fill, want the newer action's 7", tpf)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(sizes) < c.messages {
				t.Errorf("%d messages, want at least %d", len(sizes), c.messages)
			}
			for i, s := range sizes {
				if s > c.max {
					t.Errorf("message %d is %d bytes, over the bound %d", i, s, c.max)
				}
			}
			if len(got) != c.n {
				t.Fatalf("%d actions sent, want %d", len(got), c.n)
			}
			for i, u := range got {
				if u != fmt.Sprint("u", i) {
					t.Fatalf("action %d is %s's, want u%d's: out of order", i, u, i)
				}
			}
		})
	}
}
