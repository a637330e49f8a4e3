package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The rows of issue 43's table, each a flood beside the probe Envoy and
// the RLS caller (flood.go). Every loop is bounded by a count and by
// rowTimeout.

// rowTimeout bounds a row's flood: a server that stops answering fails
// the row rather than holding the run.
const rowTimeout = 5 * time.Minute

// floodRow is one way to flood the quota service. run floods target and
// returns what it did, for the summary line ("1000 streams × 1000 new
// buckets answered"), and what broke.
type floodRow struct {
	name string
	run  func(ctx context.Context, target string) (did string, broken []string, err error)
}

// parseFlood reads -flood: STREAMSxBUCKETS (streams of new buckets at
// once, each on its own connection), unread (one stream sending a report
// of 1,000 new buckets after another and never reading), streams:N (N
// concurrent streams of one new bucket each, 100 to a connection) or
// big:N (N new buckets on one stream in reports of about 0.3 MB, read by
// a client with gRPC's default 4 MiB receive limit).
func parseFlood(s string) (floodRow, error) {
	kind, arg, _ := strings.Cut(s, ":")
	num := func(what string) (int, error) {
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("-flood %q: %s wants a positive count after the colon", s, what)
		}
		return n, nil
	}
	switch kind {
	case "unread":
		if arg != "" {
			return floodRow{}, fmt.Errorf("-flood %q: unread takes no count", s)
		}
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodUnread(ctx, target, 1000, 15*time.Second)
		}}, nil
	case "streams":
		n, err := num("streams")
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodManyStreams(ctx, target, n, 100)
		}}, err
	case "big":
		n, err := num("big")
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodBig(ctx, target, n, 10_000)
		}}, err
	}
	var streams, buckets int
	if _, err := fmt.Sscanf(s, "%dx%d", &streams, &buckets); err != nil || streams < 1 || buckets < 1 {
		return floodRow{}, fmt.Errorf("-flood %q: want STREAMSxBUCKETS (both positive, e.g. 1000x1000), unread, streams:N or big:N", s)
	}
	return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
		broken, err := floodStreams(ctx, target, streams, buckets)
		return fmt.Sprintf("%d streams × %d new buckets answered", streams, buckets), broken, err
	}}, nil
}

// floodUnread is the row "one stream, 1,000 new buckets per report, never
// reading".
func floodUnread(ctx context.Context, target string, perReport int, d time.Duration) (string, []string, error) {
	c, err := dial(target)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	sent, err := rlqssim.FloodUnread(ctx, rlqsv3.NewRateLimitQuotaServiceClient(c), perReport, 100_000, d)
	if err != nil {
		return "", []string{fmt.Sprintf("the unread stream: %v", err)}, nil
	}
	return fmt.Sprintf("one stream never reading sent %d reports of %d new buckets", sent, perReport), nil, nil
}

// floodManyStreams is the row "10,000 concurrent streams".
func floodManyStreams(ctx context.Context, target string, n, perConn int) (string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, rowTimeout)
	defer cancel()
	res, err := rlqssim.FloodManyStreams(ctx, func() (*grpc.ClientConn, error) { return dial(target) }, n, perConn)
	if err != nil {
		return "", nil, err
	}
	var broken []string
	for i, err := range res.Failed {
		if i == 3 {
			broken = append(broken, fmt.Sprintf("and %d streams more", len(res.Failed)-3))
			break
		}
		broken = append(broken, err.Error())
	}
	median := time.Duration(0)
	if len(res.Took) > 0 {
		median = testenv.Percentile(res.Took, 0.5)
	}
	return fmt.Sprintf("%d of %d concurrent streams (%d a connection) answered, median %v", res.Answered, n, perConn, median.Round(time.Millisecond)), broken, nil
}

// floodBig is the row "100k buckets in 0.3 MB reports", read by a default
// gRPC client: an answer over its 4 MiB would lose the stream.
func floodBig(ctx context.Context, target string, n, perReport int) (string, []string, error) {
	c, err := dial(target)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, rowTimeout)
	defer cancel()
	res, err := rlqssim.FloodBig(ctx, rlqsv3.NewRateLimitQuotaServiceClient(c), n, perReport)
	var broken []string
	if err != nil {
		broken = append(broken, err.Error())
	}
	return fmt.Sprintf("%d of %d new buckets in reports of %.2f MB answered in %d responses, the largest %.2f MB",
		res.Answered, n, float64(res.LargestReport)/1e6, res.Responses, float64(res.LargestAnswer)/1e6), broken, nil
}
