package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}
