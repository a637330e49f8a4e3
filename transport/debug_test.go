package transport_test

import (
	"os"
	"strings"
	"testing"
)

// The debug port never shows a database password from the command line.
func TestDebugRedactsCommandLine(t *testing.T) {
	saved := os.Args
	os.Args = append(append([]string{}, saved...), "-db", "postgres://odata:topsecret@db.internal/odata", "-db=host=h password=hunter22")
	defer func() { os.Args = saved }()
	h := start(t, nil, map[string]string{"a.yaml": "domain: d\n"})
	for _, path := range []string{"/debug/pprof/cmdline", "/stats"} {
		code, body := h.Get(t, h.Debug+path)
		if code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		if strings.Contains(body, "topsecret") || strings.Contains(body, "hunter22") {
			t.Errorf("%s shows a password:\n%s", path, body)
		}
		if !strings.Contains(body, "postgres://odata:xxxxx@db.internal/odata") {
			t.Errorf("%s does not show the redacted URL:\n%.2000s", path, body)
		}
	}
}
