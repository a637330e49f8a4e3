package harness

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunCommand(t *testing.T) {
	repl := strings.NewReplacer("{who}", "world")
	tests := []struct {
		name    string
		argv    []string
		env     []string
		timeout time.Duration
		code    int
		errHas  string // "" means no error
	}{
		{"success", []string{"/bin/sh", "-c", "exit 0"}, nil, time.Minute, 0, ""},
		{"exit status passes through", []string{"/bin/sh", "-c", "exit 3"}, nil, time.Minute, 3, "exit status 3"},
		{"placeholders replaced", []string{"/bin/sh", "-c", `test "$0" = world`, "{who}"}, nil, time.Minute, 0, ""},
		{"environment added", []string{"/bin/sh", "-c", `test "$HARNESS_X" = y`}, []string{"HARNESS_X=y"}, time.Minute, 0, ""},
		{"killed at the timeout", []string{"/bin/sh", "-c", "exec sleep 30"}, nil, 200 * time.Millisecond, 1, "ran past -timeout"},
		{"no command", nil, nil, time.Minute, 1, "no command"},
		{"missing binary", []string{"/nonexistent/cmd"}, nil, time.Minute, 1, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, err := RunCommand(context.Background(), tc.argv, repl, tc.env, tc.timeout)
			if code != tc.code {
				t.Errorf("code = %d, want %d (err %v)", code, tc.code, err)
			}
			if (tc.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
				t.Errorf("err = %v, want one holding %q", err, tc.errHas)
			}
		})
	}
}
