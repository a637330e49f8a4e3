package tlsclient_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tlsclient"
)

func TestOptionalIsNilWhenDisabled(t *testing.T) {
	// The files do not exist: a disabled switch must not even read them.
	cfg, err := tlsclient.Optional(false, "/nonexistent/ca.pem", "/nonexistent/c.pem", "/nonexistent/k.pem", false)
	if cfg != nil || err != nil {
		t.Fatalf("disabled: %v, %v; want nil, nil", cfg, err)
	}
	cfg, err = tlsclient.Optional(true, "", "", "", false)
	if cfg == nil || err != nil {
		t.Fatalf("enabled: %v, %v; want a configuration", cfg, err)
	}
	if _, err := tlsclient.Optional(true, "/nonexistent/ca.pem", "", "", false); err == nil {
		t.Fatal("enabled with a missing CA file: no error")
	}
}

func TestCheckPair(t *testing.T) {
	for _, tc := range []struct {
		cert, key string
		ok        bool
	}{
		{"", "", true},
		{"c.pem", "k.pem", true},
		{"c.pem", "", false},
		{"", "k.pem", false},
	} {
		err := tlsclient.CheckPair(tc.cert, tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPair(%q, %q) = %v", tc.cert, tc.key, err)
		}
		if err != nil && !strings.Contains(err.Error(), "set together") {
			t.Errorf("CheckPair(%q, %q): %v does not say what is wrong", tc.cert, tc.key, err)
		}
	}
}
