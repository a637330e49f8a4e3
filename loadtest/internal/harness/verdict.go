package harness

import (
	"context"
	"log"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Verdict ends a scenario program: FAIL on an error, BROKEN lines and FAIL
// when promises broke, PASS otherwise. It exits non-zero on failure.
func Verdict(broken []string, err error) {
	if err != nil {
		log.Fatalf("FAIL: %v", err)
	}
	if len(broken) > 0 {
		for _, b := range broken {
			log.Printf("BROKEN: %s", b)
		}
		log.Fatalf("FAIL: %d promise(s) broken", len(broken))
	}
	log.Print("PASS")
}

// StartRLS writes rules under file into the scenario's runtime directory,
// starts sluice and dials its gRPC port. Close kills sluice and closes the
// connection.
func (sc *Scenario) StartRLS(ctx context.Context, file, rules string) (*testenv.Sluice, rlsv3.RateLimitServiceClient, error) {
	if err := testenv.WriteRules(sc.Sluice, file, rules); err != nil {
		return nil, nil, err
	}
	s, err := testenv.StartSluice(ctx, sc.Sluice)
	if err != nil {
		return nil, nil, err
	}
	sc.TB.Cleanup(s.Kill)
	conn, err := Dial(s.GRPC)
	if err != nil {
		return nil, nil, err
	}
	sc.TB.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn), nil
}
