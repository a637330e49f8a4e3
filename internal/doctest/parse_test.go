package doctest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []block // file, body and lang only compared where set
		err        string
	}{
		{name: "runs", text: "x\n\n```sh\necho hi\n```\n", want: []block{{lang: "sh", body: "echo hi\n", timeout: defaultTimeout}}},
		{name: "skip", text: "<!-- doc-test: skip (needs docker) -->\n```sh\ndocker ps\n```\n",
			want: []block{{lang: "sh", body: "docker ps\n", skip: "needs docker", timeout: defaultTimeout}}},
		{name: "timeout", text: "<!-- doc-test: timeout 90s -->\n\n```bash\nmake\n```\n",
			want: []block{{lang: "bash", body: "make\n", timeout: 90 * time.Second}}},
		{name: "marker belongs to the next block only", text: "<!-- doc-test: skip (x) -->\n```sh\na\n```\n```sh\nb\n```\n",
			want: []block{{lang: "sh", body: "a\n", skip: "x", timeout: defaultTimeout}, {lang: "sh", body: "b\n", timeout: defaultTimeout}}},
		{name: "longer fence", text: "````text\n```sh\n````\n", want: []block{{lang: "text", body: "```sh\n", timeout: defaultTimeout}}},
		{name: "no language", text: "```\nmake run\n```\n", err: "without a language"},
		{name: "skip without reason", text: "<!-- doc-test: skip -->\n```sh\nx\n```\n", err: "want skip (reason)"},
		{name: "marker on yaml", text: "<!-- doc-test: skip (x) -->\n```yaml\na: 1\n```\n", err: "never runs"},
		{name: "unclosed", text: "```sh\nx\n", err: "never closed"},
		{name: "timeout too long", text: "<!-- doc-test: timeout 1h -->\n```sh\nx\n```\n", err: "up to 5m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse("f.md", tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d blocks, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.lang != w.lang || g.body != w.body || g.skip != w.skip || g.timeout != w.timeout {
					t.Errorf("block %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// A failing example fails, a hanging one is stopped at its timeout with the
// processes it started, and a passing one passes.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{"true\n", true},
		{"exit 3\n", false},
		{"false\necho after\n", false},      // -e: the first failure ends it
		{"false | cat\n", false},            // pipefail
		{"sleep 300 &\nsleep 300\n", false}, // hung, background child killed
	} {
		start := time.Now()
		_, err := run(context.Background(), block{body: tc.body, timeout: time.Second}, dir, nil)
		if (err == nil) != tc.ok {
			t.Errorf("%q: error %v, want ok %v", tc.body, err, tc.ok)
		}
		// Killed at 5 s (hungAfter), its output closed at most 5 s later
		// (WaitDelay): far below the sleeps, however loaded the machine.
		if time.Since(start) > 150*time.Second {
			t.Errorf("%q: ran %v, not killed when hung", tc.body, time.Since(start))
		}
	}
}
