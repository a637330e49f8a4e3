package server_test

import "github.com/sluicehq/sluice/internal/testenv/rlsserver"

// The service these tests start is the shared harness's (package
// rlsserver, which package transport's tests use too); these names keep
// the tests short.
type harness = rlsserver.Harness

var (
	t0                = rlsserver.T0
	start             = rlsserver.StartEnv
	startClock        = rlsserver.StartEnvClock
	readFile          = rlsserver.ReadRules
	settingsFor       = rlsserver.SettingsFor
	newServer         = rlsserver.NewServer
	rlsReq            = rlsserver.RLSReq
	forEachGRPCServer = rlsserver.ForEachGRPCServer
	exactRules        = rlsserver.ExactRules
	quotaServers      = rlsserver.GRPCServers
)

const (
	anyValueRule = rlsserver.AnyValueRule
	quotaRules   = rlsserver.QuotaRules
)
