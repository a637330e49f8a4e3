package settings_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/settings"
)

func TestEnvWarnings(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string // "" : no warning
	}{
		{"BACKEND_TPYE=memory", "BACKEND_TPYE is not a setting sluice reads; did you mean BACKEND_TYPE?"},
		{"SLUICE_BACKEND_TIMOUT=2s", "SLUICE_BACKEND_TIMOUT is not a setting sluice reads; did you mean SLUICE_BACKEND_TIMEOUT?"},
		{"SLUICE_SHARDZ=4", "did you mean SLUICE_SHARDS?"},
		{"REDIS_SOCKET_TPYE=tcp", "did you mean REDIS_SOCKET_TYPE?"},
		{"RUNTIME_ROTO=/x", "did you mean RUNTIME_ROOT?"},
		{"SLUICE_SOMETHING_ELSE_ENTIRELY=1", "SLUICE_SOMETHING_ELSE_ENTIRELY is not a setting sluice reads (docs"},
		{"BACKEND_TYPE=memory", ""},
		{"KVSTORE_URL=x:1", ""},
		{"SLUICE_DB=sqlite:x", ""},
		{"SLUICE_BACKEND_TIMEOUT=2s", ""},
		{"HOME=/root", ""},
		{"HOSTNAME=x", ""},
		{"PATH=/bin", ""},
		{"PWD=/", ""},
		{"GOPATH=/go", ""},
		{"LC_ALL=C", ""},
		{"TMPDIR=/tmp", ""},
	} {
		got := strings.Join(settings.EnvWarnings([]string{tc.env}, "SLUICE_DB"), "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: warned %q, want %q", tc.env, got, tc.want)
		}
	}
}
