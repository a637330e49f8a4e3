package transport_test

import "github.com/sluicehq/sluice/internal/testenv/rlsserver"

// The service these tests start is the shared harness's (package
// rlsserver, which package server's tests use too); these names keep
// the tests short.
type harness = rlsserver.Harness

var (
	start             = rlsserver.StartEnv
	startClock        = rlsserver.StartEnvClock
	readFile          = rlsserver.ReadRules
	jsonEqual         = rlsserver.JSONEqual
	settingsFor       = rlsserver.SettingsFor
	rlsReq            = rlsserver.RLSReq
	forEachGRPCServer = rlsserver.ForEachGRPCServer
	with              = rlsserver.With
	exactRules        = rlsserver.ExactRules
	quotaServers      = rlsserver.GRPCServers
)

const (
	anyValueRule = rlsserver.AnyValueRule
	quotaRules   = rlsserver.QuotaRules
)
