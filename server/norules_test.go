package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestNoRulesIsLoud: a rules directory that is missing, or empty, is a
// warning at every load and the statistic config_load_empty; /healthcheck
// stays 200 as the reference's unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// asks it to fail.
func TestNoRulesIsLoud(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		healthy int
	}{
		{"missing directory", map[string]string{"RUNTIME_SUBDIRECTORY": "nosuchdir"}, 200},
		{"missing directory, watching the root", map[string]string{"RUNTIME_SUBDIRECTORY": "nosuchdir", "RUNTIME_WATCH_ROOT": "true"}, 200},
		{"empty directory", nil, 200},
		{"missing directory, health required", map[string]string{"RUNTIME_SUBDIRECTORY": "nosuchdir", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, 500},
		{"empty directory, health required", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.env, nil)
			if got := h.Stats.CounterValue("ratelimit.service.config_load_empty"); got != 1 {
				t.Errorf("config_load_empty = %d after the first load, want 1", got)
			}
			if !strings.Contains(h.Logs.String(), "NO RATE LIMIT RULES: the rules directory ") {
				t.Errorf("no warning:\n%s", h.Logs.String())
			}
			if code, _ := h.Get(t, h.HTTP+"/healthcheck"); (code == 200) != (tc.healthy == 200) {
				t.Errorf("/healthcheck %d, want %d", code, tc.healthy)
			}
		})
	}
}

// TestNoRulesWarnsAtEveryLoad: rules come, then go again: the second empty
// load is warned of and counted too.
func TestNoRulesWarnsAtEveryLoad(t *testing.T) {
	h := start(t, map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, nil)
	rule := filepath.Join(h.CfgDir, "a.yaml")
	tmp := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(tmp, []byte("domain: a\ndescriptors:\n  - {key: x, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	if err := os.Rename(tmp, rule); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "healthy with rules", func() bool { code, _ := h.Get(t, h.HTTP+"/healthcheck"); return code == 200 })
	if err := os.Remove(rule); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a second empty load", func() bool { return h.Stats.CounterValue("ratelimit.service.config_load_empty") == 2 })
	if n := strings.Count(h.Logs.String(), "NO RATE LIMIT RULES"); n != 2 {
		t.Errorf("%d warnings, want 2", n)
	}
	if code, _ := h.Get(t, h.HTTP+"/healthcheck"); code == 200 {
		t.Error("healthy again without rules")
	}
}
