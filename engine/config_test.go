package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

// TestValidationErrors covers every message of ratelimit-compat.md §4.1.
func TestValidationErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		files []string
		merge bool
		want  string
	}{
		{"bad yaml", []string{"domain: d\ndescriptors:\n  - key: [\n"}, false, "f0.yaml: error loading config file: yaml: line 3: did not find expected node content"},
		{"type error", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 6: requests_per_unit: cannot unmarshal !!int `-1` into uint32 (a whole number from 0 to 4294967295)"},
		// yaml.v2 names the line and the type it decodes into (the
		// reference's text); sluice adds the field.
		{"descriptors not a list", []string{"domain: d\ndescriptors: abc\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 2: descriptors: cannot unmarshal !!str `abc` into []config.YamlDescriptor"},
		{"nested descriptors not a list", []string{"domain: d\ndescriptors:\n  - key: k\n    descriptors: 5\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: descriptors: cannot unmarshal !!int `5` into []config.YamlDescriptor"},
		{"rate_limit not a map", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: x\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: rate_limit: cannot unmarshal !!str `x` into config.YamlRateLimit"},
		{"replaces not a list", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: x}\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: replaces: cannot unmarshal !!str `x` into []config.yamlReplaces"},
		{"a file that is a list", []string{"- a\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}"},
		{"key not a string", []string{"domain: d\n0.25: x\n"}, false, "f0.yaml: config error, key is not of type string: 0.25"},
		{"unknown key", []string{"domain: d\nratelimit: x\n"}, false, "f0.yaml: config error, unknown key 'ratelimit'"},
		{"unknown nested key", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requestsperunit: 1}\n"}, false,
			"f0.yaml: config error, unknown key 'requestsperunit'"},
		{"list of non-maps", []string{"domain: d\ndescriptors: [a]\n"}, false, "f0.yaml: config error, yaml file contains list of type other than map: a"},
		{"float leaf", []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n"}, false,
			"f0.yaml: error checking config: 'requests_per_unit' is 1.5: not a string, a boolean or a whole number in range (requests_per_unit and burst: 0 to 4294967295) (line 4)"},
		{"empty domain", []string{"descriptors:\n  - key: a\n"}, false, "f0.yaml: config file cannot have empty domain"},
		{"empty file", []string{""}, false, "f0.yaml: config file cannot have empty domain"},
		{"duplicate domain", []string{"domain: d\n", "domain: d\n"}, false, "f1.yaml: duplicate domain 'd' in config file"},
		{"empty key", []string{"domain: d\ndescriptors:\n  - value: a\n"}, false, "f0.yaml: descriptor has empty key"},
		{"duplicate composite key", []string{"domain: d\ndescriptors:\n  - {key: a, value: b}\n  - {key: a, value: b}\n"}, false,
			"f0.yaml: duplicate descriptor composite key 'd.a_b'"},
		{"duplicate nested key", []string{"domain: d\ndescriptors:\n  - key: p\n    descriptors:\n    - {key: a}\n    - {key: a}\n"}, false,
			"f0.yaml: duplicate descriptor composite key 'd.p.a'"},
		{"duplicate wildcard", []string{"domain: d\ndescriptors:\n  - {key: a, value: 'x*'}\n  - {key: a, value: 'x*'}\n"}, false,
			"f0.yaml: duplicate descriptor composite key 'd.a_x*'"},
		{"duplicate across merged files", []string{"domain: d\ndescriptors:\n  - {key: a}\n", "domain: d\ndescriptors:\n  - {key: a}\n"}, true,
			"f1.yaml: duplicate descriptor composite key 'd.a'"},
		{"unit with unlimited", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unlimited: true, unit: second}}\n"}, false,
			"f0.yaml: should not specify rate limit unit when unlimited"},
		{"bad unit", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"}, false,
			"f0.yaml: invalid rate limit unit 'fortnight'"},
		{"missing unit", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {requests_per_unit: 1}}\n"}, false, "f0.yaml: invalid rate limit unit ''"},
		{"unknown is not a unit", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: unknown, requests_per_unit: 1}}\n"}, false,
			"f0.yaml: invalid rate limit unit 'unknown'"},
		{"empty replaces", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}}\n"}, false,
			"f0.yaml: should not have an empty replaces entry"},
		{"replaces itself", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}}\n"}, false,
			"f0.yaml: replaces should not contain name of same descriptor"},
		{"share_threshold without wildcard", []string{"domain: d\ndescriptors:\n  - {key: a, value: b, share_threshold: true, rate_limit: {unit: second, requests_per_unit: 1}}\n"}, false,
			"f0.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'"},
		{"nested metadata key not a string", []string{"domain: d\ndescriptors:\n  - key: a\n    metadata: {n: {1: x}}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"}, false,
			"f0.yaml: error parsing metadata: invalid key type: int"},
		// yaml.v2, as the reference: a quoted "yes" is a string, not a bool.
		{"quoted yes for a bool", []string{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: \"yes\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"}, false,
			"f0.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!str `yes` into bool"},
		// The line yaml.v2 reports for an unclosed quote is where it gives up.
		{"unclosed quote", []string{"domain: d\ndescriptors:\n  - key: \"a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"}, false,
			"f0.yaml: error loading config file: yaml: line 7: found unexpected end of stream"},
		// sluice's own check: known keys in the wrong place are not ignored.
		{"unit at the top level", []string{"domain: d\nunit: second\n"}, false, "f0.yaml: config error, key 'unit' is not valid at the top level"},
		{"domain in a descriptor", []string{"domain: d\ndescriptors:\n  - {key: a, domain: x}\n"}, false, "f0.yaml: config error, key 'domain' is not valid at 'descriptors'"},
		{"key in rate_limit", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {key: b, unit: second, requests_per_unit: 1}}\n"}, false,
			"f0.yaml: config error, key 'key' is not valid at 'rate_limit'"},
		{"metadata at the top level", []string{"domain: d\nmetadata: {a: b}\n"}, false, "f0.yaml: config error, key 'metadata' is not valid at the top level"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var files []engine.ConfigFile
			for i, y := range tc.files {
				files = append(files, engine.ConfigFile{Name: "f" + string(rune('0'+i)) + ".yaml", YAML: []byte(y)})
			}
			_, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: tc.merge})
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Fatalf("got  %q\nwant %q", err.Error(), tc.want)
			}
			var ce *engine.ConfigError
			if !asConfigError(err, &ce) {
				t.Fatalf("not a *ConfigError: %T", err)
			}
		})
	}
}

func asConfigError(err error, target **engine.ConfigError) bool {
	ce, ok := err.(*engine.ConfigError)
	*target = ce
	return ok
}

func TestAcceptedConfigs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		files []string
		merge bool
	}{
		{"unit in any case", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: SeCoNd, requests_per_unit: 1}}\n"}, false},
		{"unlimited with rpu", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unlimited: true, requests_per_unit: 5}}\n"}, false},
		{"replaces an unknown name", []string{"domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: nowhere}]}}\n"}, false},
		{"merged domains", []string{"domain: d\ndescriptors:\n  - {key: a}\n", "domain: d\ndescriptors:\n  - {key: b}\n"}, true},
		{"week month year", []string{"domain: d\ndescriptors:\n  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}\n  - {key: m, rate_limit: {unit: month, requests_per_unit: 1}}\n  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}\n"}, false},
		{"metadata with boolean keys", []string{"domain: d\ndescriptors:\n  - key: a\n    metadata: {true: x, m: {false: y, true: {yes: z}}}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"}, false},
		{"metadata of every kind", []string{"domain: d\ndescriptors:\n  - key: a\n    metadata: {s: x, n: 1, f: 1.5, b: true, z: null, l: [1, a], m: {k: v}}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var files []engine.ConfigFile
			for i, y := range tc.files {
				files = append(files, engine.ConfigFile{Name: "f" + string(rune('0'+i)), YAML: []byte(y)})
			}
			if _, err := engine.LoadConfig(files, engine.ConfigOptions{MergeDomains: tc.merge}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDump(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml", "rl.yaml")
	dump := f.svc.Config().Dump()
	for _, line := range []string{
		"probe.k_two: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false",
		"probe.shadow: unit=MINUTE requests_per_unit=1, shadow_mode: true, quota_mode: false",
		"probe.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
		"probe.wild_pre*: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false",
		"rl.service_service_1: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true",
	} {
		if !strings.Contains(dump, line+"\n") {
			t.Errorf("dump lacks %q", line)
		}
	}
	if strings.Contains(dump, "nolimit") {
		t.Errorf("dump lists a rule without rate_limit")
	}
}

func TestModelConfigFromXDSPath(t *testing.T) {
	t.Parallel()
	// xDS hands the engine a model, not YAML; it goes through the same checks.
	dc := &engine.DomainConfig{Domain: "x", Descriptors: []engine.DescriptorConfig{
		{Key: "a", RateLimit: &engine.RateLimitConfig{Unit: "MINUTE", RequestsPerUnit: 1}},
		{Key: "a", RateLimit: &engine.RateLimitConfig{Unit: "MINUTE", RequestsPerUnit: 1}},
	}}
	_, err := engine.LoadConfig([]engine.ConfigFile{{Name: "res", Domain: dc}}, engine.ConfigOptions{})
	if err == nil || err.Error() != "res: duplicate descriptor composite key 'x.a'" {
		t.Fatalf("got %v", err)
	}
}

func FuzzParseYAML(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, value: 'x*', rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	f.Add([]byte("domain: d\n0.25: x\n"))
	f.Add([]byte("descriptors: [a]"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    metadata: {1: x}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, value: 2001-12-14, shadow_mode: \"yes\", metadata: {n: {1: y}}}\n"))
	f.Add([]byte("domain: d\ndomain: e\nunit: second\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: \"a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "fuzz", YAML: data}}, engine.ConfigOptions{})
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz: ") {
			t.Fatalf("error without the file name: %v", err)
		}
	})
}

// TestYAMLv2Semantics: files the reference (yaml.v2) loads load the same way.
func TestYAMLv2Semantics(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		check      func(t *testing.T, c *engine.Config, root *engine.DomainConfig)
	}{
		{"duplicate keys: the last wins", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 5}\n",
			func(t *testing.T, c *engine.Config, root *engine.DomainConfig) {
				if got := root.Descriptors[0].RateLimit.RequestsPerUnit; got != 5 {
					t.Errorf("requests_per_unit %d, want 5", got)
				}
				if got := c.Dump(); got != "d.a: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n" {
					t.Errorf("dump %q", got)
				}
			}},
		{"int keys in metadata", "domain: d\ndescriptors:\n  - key: a\n    metadata: {1: x}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			func(t *testing.T, _ *engine.Config, root *engine.DomainConfig) {
				if got := fmt.Sprint(root.Descriptors[0].Metadata); got != "map[1:x]" {
					t.Errorf("metadata %s, want map[1:x]", got)
				}
			}},
		{"unquoted date is text", "domain: ys\ndescriptors:\n  - key: a\n    value: 2001-12-14\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			func(t *testing.T, c *engine.Config, _ *engine.DomainConfig) {
				if got := c.Dump(); got != "ys.a_2001-12-14: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n" {
					t.Errorf("dump %q", got)
				}
			}},
		{"unquoted yes is a bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			func(t *testing.T, c *engine.Config, _ *engine.DomainConfig) {
				if got := c.Dump(); got != "d.a: unit=SECOND requests_per_unit=1, shadow_mode: true, quota_mode: false\n" {
					t.Errorf("dump %q", got)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, err := engine.ParseYAML("f.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte(tc.yaml)}}, engine.ConfigOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c, root)
		})
	}
}
