package odata_test

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
)

// The per-key limit against the official clients' timing, on a simulated
// clock. What each client does between two requests of one key (from their
// published sources; the response time of a request, 20–300 ms, is part of
// every gap, as the clients wait for a response before the next request):
//
//   - Python: sleeps 0.5 s ± 30% after each response; on 429 it waits
//     Retry-After and retries.
//   - JavaScript: paces 0.5 s ± 30% within a call, but restarts its pacing on
//     each call: a query split by location makes 3 calls of 1–4 pages whose
//     first requests come 0, 29 and 529 ms after the previous response; the
//     caller then works on the rows for 2–5 s. It throws on a 429.
//   - R: per location a $count, paced like every request at 0.5 s ± 30%,
//     then the location's first page right after the count's response, then
//     1–5 more pages paced at 0.5 s ± 30%. It throws on a 429.
//   - shell: an unpaced loop (the next request as soon as a response is in).
//
// The paced clients must finish 1,000 requests without a 429; the unpaced
// loop must get 429s and be held to 2 requests/s on average: at most
// 2 × 10 + burst admitted in any 10 s.

type pacedClient struct {
	name string
	// gaps returns the wait before each next request, given the request's
	// index; rng is the client's own.
	gap     func(i int, rng *rand.Rand) time.Duration
	retries bool // waits Retry-After and retries on 429 (counted all the same)
	paced   bool // must never see a 429
}

func responseTime(rng *rand.Rand) time.Duration {
	return time.Duration(20+rng.IntN(281)) * time.Millisecond
}

func jittered(rng *rand.Rand) time.Duration {
	return time.Duration(float64(500*time.Millisecond) * (0.7 + 0.6*rng.Float64()))
}

func officialClients() []pacedClient {
	return []pacedClient{
		{name: "python", retries: true, paced: true, gap: func(_ int, rng *rand.Rand) time.Duration {
			return responseTime(rng) + jittered(rng)
		}},
		{name: "javascript", paced: true, gap: jsGaps()},
		{name: "r", paced: true, gap: rGaps()},
		{name: "shell", gap: func(_ int, rng *rand.Rand) time.Duration { return responseTime(rng) }},
	}
}

// jsGaps walks the JavaScript client's split queries: 3 calls of 1–4 pages,
// calls 0, 29 and 529 ms after the previous response, then 2–5 s of work.
func jsGaps() func(int, *rand.Rand) time.Duration {
	call, pagesLeft := 0, 0
	return func(_ int, rng *rand.Rand) time.Duration {
		if pagesLeft > 0 {
			pagesLeft--
			return responseTime(rng) + jittered(rng)
		}
		pagesLeft = rng.IntN(4) // pages after the call's first request
		call = (call + 1) % 3
		switch call {
		case 1:
			return responseTime(rng) + time.Duration(2000+rng.IntN(3001))*time.Millisecond
		case 2:
			return responseTime(rng) + 29*time.Millisecond
		default:
			return responseTime(rng) + 529*time.Millisecond
		}
	}
}

// rGaps walks the R client: per location a $count, at once the first page,
// then 1–5 more.
func rGaps() func(int, *rand.Rand) time.Duration {
	left, afterCount := 0, false
	return func(_ int, rng *rand.Rand) time.Duration {
		switch {
		case afterCount:
			afterCount = false
			return responseTime(rng) // the first page, unpaced
		case left > 0:
			left--
			return responseTime(rng) + jittered(rng)
		}
		left, afterCount = 1+rng.IntN(5), true
		return responseTime(rng) + jittered(rng) // the next location's $count
	}
}

// runClient sends n requests of one key and returns the times of the
// admitted ones and the number of 429s.
func runClient(t *testing.T, lim odata.RateLimiter, clock *testenv.Clock, c pacedClient, key string, n int) (admitted []time.Time, refused int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(len(c.name)), 14))
	for i := 0; i < n; i++ {
		if i > 0 {
			clock.Add(c.gap(i, rng))
		}
		for {
			ok, retry, err := lim.Allow(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted = append(admitted, clock.Now())
				break
			}
			refused++
			if retry <= 0 || retry > time.Second {
				t.Fatalf("%s: Retry-After %v, want (0, 1s]", c.name, retry)
			}
			if !c.retries {
				break // the client throws; the test goes on to count
			}
			clock.Add(time.Duration(math.Ceil(retry.Seconds())) * time.Second)
		}
	}
	return admitted, refused
}

func checkPacing(t *testing.T, newLimiter func(clock *testenv.Clock) odata.RateLimiter) {
	for _, c := range officialClients() {
		t.Run(c.name, func(t *testing.T) {
			clock := testenv.NewClock(time.Unix(1_700_000_000, 123e6))
			lim := newLimiter(clock)
			admitted, refused := runClient(t, lim, clock, c, "key:"+c.name, 1000)
			span := admitted[len(admitted)-1].Sub(admitted[0])
			t.Logf("%s: %d admitted, %d refused, %.2f req/s over %v", c.name, len(admitted), refused, float64(len(admitted))/span.Seconds(), span.Round(time.Second))
			if c.paced {
				if refused > 0 {
					t.Fatalf("%s: %d requests refused; a client pacing at 2/s must never be", c.name, refused)
				}
				return
			}
			if refused == 0 {
				t.Fatalf("%s: an unpaced loop was never refused", c.name)
			}
			// In any 10 s: at most 2 × 10 + burst, and (it is not just
			// refusing) at least 2 × 10 - 1 once the loop is running.
			lo := 0
			for hi := range admitted {
				for admitted[hi].Sub(admitted[lo]) >= 10*time.Second {
					lo++
				}
				if n := hi - lo + 1; n > 20+odata.DefaultBurst {
					t.Fatalf("%s: %d admitted in 10 s from %v", c.name, n, admitted[lo])
				}
			}
			if rate := float64(len(admitted)-odata.DefaultBurst) / span.Seconds(); rate > 2.0 || rate < 1.9 {
				t.Fatalf("%s: %.3f req/s on average beyond the burst, want 2", c.name, rate)
			}
		})
	}
}

func TestClientPacingLocal(t *testing.T) {
	checkPacing(t, func(clock *testenv.Clock) odata.RateLimiter {
		lim, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: 2, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		return lim
	})
}

// TestClientPacingRemote: the same clients through a remote rate limit
// service over gRPC, whose engine loads RateLimitConfigYAML (the file an
// operator gives the remote sluice).
func TestClientPacingRemote(t *testing.T) {
	checkPacing(t, func(clock *testenv.Clock) odata.RateLimiter {
		svc := remoteEngine(t, clock)
		gs := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(gs, &rlsServer{svc: svc})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
		remote, err := odata.NewRemoteLimiter(odata.RemoteLimiterOptions{Target: ln.Addr().String(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { remote.Close() })
		return remote
	})
}
