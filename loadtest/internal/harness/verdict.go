package harness

import (
	"context"
	"log"

	"github.com/sluicehq/sluice/internal/testenv"
	"google.golang.org/grpc"
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

// StartWithRules writes rules under name into cfg's runtime directory,
// starts sluice and dials its gRPC port. The caller kills s and closes conn.
func StartWithRules(ctx context.Context, cfg testenv.SluiceConfig, name, rules string) (s *testenv.Sluice, conn *grpc.ClientConn, err error) {
	if err := testenv.WriteRules(cfg, name, rules); err != nil {
		return nil, nil, err
	}
	if s, err = testenv.StartSluice(ctx, cfg); err != nil {
		return nil, nil, err
	}
	if conn, err = Dial(s.GRPC); err != nil {
		s.Kill()
		return nil, nil, err
	}
	return s, conn, nil
}
