package engine

import (
	"strings"
	"testing"
)

// The probe's rule-file findings: an out-of-range integer is named by its
// field and line, a second YAML document is an error rather than dropped,
// and a rule key with CR/LF stays on one /rlconfig line.
func TestYAMLProblemsNamed(t *testing.T) {
	rule := func(v string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: " + v + "\n"
	}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"above uint32", rule("4294967296"), []string{"line 6: requests_per_unit: cannot unmarshal !!int `4294967296` into uint32", "0 to 4294967295"}},
		{"negative", rule("-1"), []string{"line 6: requests_per_unit: cannot unmarshal !!int `-1`"}},
		{"above 64 bits", rule("99999999999999999999999"), []string{"error checking config: 'requests_per_unit' is 1e+23", "(line 6)"}},
		{"flow style", "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 4294967296}}\n",
			[]string{"line 3: requests_per_unit: cannot unmarshal"}},
		{"burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: token_bucket\n      burst: 99999999999\n",
			[]string{"line 8: burst: cannot unmarshal"}},
		{"second document", "domain: d\n---\ndomain: e\n", []string{"second YAML document starts at line 2"}},
		{"second document after an opening ---", "---\ndomain: d\n---\ndomain: e\n", []string{"second YAML document starts at line 3"}},
	} {
		_, err := LoadConfig([]ConfigFile{{Name: "f.yaml", YAML: []byte(tc.yaml)}}, ConfigOptions{})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q in it", tc.name, err, w)
			}
		}
	}
	for _, ok := range []string{"domain: d\n", "---\ndomain: d\n", "domain: d\n---\n", "---\ndomain: d\n...\n"} {
		if _, err := LoadConfig([]ConfigFile{{Name: "f.yaml", YAML: []byte(ok)}}, ConfigOptions{}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	cfg, err := LoadConfig([]ConfigFile{{Name: "f.yaml", YAML: []byte("domain: d\ndescriptors:\n  - key: \"a\\r\\nb: unit=SECOND requests_per_unit=999\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Dump(); strings.Count(d, "\n") != 1 || !strings.Contains(d, `d.a\r\nb`) {
		t.Fatalf("/rlconfig of a key with CR/LF: %q, want one line with the escapes", d)
	}
}
