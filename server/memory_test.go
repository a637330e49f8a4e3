package server_test

import (
	"fmt"
	"strings"
	"testing"
)

func jsonReq(value string) string {
	return `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"` + value + `"}]}]}`
}

// The memory backend is bounded: an oversized key is a 400 naming the limit,
// and new counters past SLUICE_MEMORY_MAX_BYTES are a 503 while counters
// already held keep deciding.
func TestMemoryBackendBounds(t *testing.T) {
	h := start(t, map[string]string{"SLUICE_MEMORY_MAX_BYTES": "4096", "SLUICE_MEMORY_MAX_KEY_BYTES": "200", "SLUICE_SHARDS": "2"},
		map[string]string{"a.yaml": anyValueRule})
	code, _, body := h.Post(t, "/json", jsonReq(strings.Repeat("v", 300)))
	// /json answers the reference's plain "Bad Request"; the reason is logged.
	if code != 400 || body != "Bad Request\n" || !strings.Contains(h.Logs.String(), "over the limit of 200 bytes") {
		t.Errorf("oversized key: %d %q", code, body)
	}
	if code, _, body := h.Post(t, "/json", jsonReq("first")); code != 200 {
		t.Fatalf("first key: %d %q", code, body)
	}
	full := 0
	for i := 0; i < 200 && full == 0; i++ {
		code, _, body := h.Post(t, "/json", jsonReq(fmt.Sprintf("value-%d", i)))
		switch {
		case code == 503 && strings.Contains(body, "memory backend full"):
			full = i
		case code != 200:
			t.Fatalf("key %d: %d %q", i, code, body)
		}
	}
	if full == 0 {
		t.Fatal("200 distinct keys of ~50 bytes fit in 4096 bytes")
	}
	if code, _, body := h.Post(t, "/json", jsonReq("first")); code != 200 {
		t.Errorf("a held counter while full: %d %q", code, body)
	}
}
