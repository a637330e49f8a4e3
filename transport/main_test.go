package transport_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
)

func TestMain(m *testing.M) { rlsserver.VerifyNoLeaks(m) }
