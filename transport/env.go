package transport

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// aliasPrefixes pair the upstream variable names with the spec's neutral ones.
// Either spelling works; both set to different values is an error.
var aliasPrefixes = [][2]string{
	{"REDIS_", "KVSTORE_"},
	{"MEMCACHE_", "MCSTORE_"},
	{"USE_PROMETHEUS", "USE_PULLMETRICS"},
	{"PROMETHEUS_", "PULLMETRICS_"},
	{"USE_DOG_STATSD_MOGRIFIERS", "TAGGED_STATSD_MOGRIFIERS"},
	{"USE_DOG_STATSD", "USE_TAGGED_STATSD"},
	{"DOG_STATSD_MOGRIFIER_", "TAGGED_STATSD_MOGRIFIERS_"},
}

// aliasOf returns the other spelling of an upstream name, or "".
func aliasOf(name string) string {
	for _, p := range aliasPrefixes {
		if strings.HasPrefix(name, p[0]) {
			return p[1] + strings.TrimPrefix(name, p[0])
		}
	}
	return ""
}

// Env reads variables with defaults and remembers the first error, so a
// settings reader can read everything and report once.
type Env struct {
	lookup func(string) (string, bool)
	err    error
}

// NewEnv reads from lookup (os.LookupEnv at the edge, a map in tests).
func NewEnv(lookup func(string) (string, bool)) *Env { return &Env{lookup: lookup} }

// FromMap is a lookup over a map, for tests and examples.
func FromMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Err is the first problem met.
func (e *Env) Err() error { return e.err }

func (e *Env) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// Lookup returns the value under either spelling of name (name is the upstream spelling).
func (e *Env) Lookup(name string) (string, bool) {
	v, ok := e.lookup(name)
	alias := aliasOf(name)
	if alias == "" {
		return v, ok
	}
	av, aok := e.lookup(alias)
	switch {
	case ok && aok && v != av:
		e.fail(fmt.Errorf("environment: %s=%q and %s=%q are both set and differ; set one of them", name, v, alias, av))
		return v, true
	case aok && !ok:
		return av, true
	}
	return v, ok
}

func (e *Env) String(name, def string) string {
	if v, ok := e.Lookup(name); ok {
		return v
	}
	return def
}

// parse reads name with conv; unset or empty is def, a value conv refuses
// is an error saying what the value should be (want).
func parse[T any](e *Env, name string, def T, want string, conv func(string) (T, error)) T {
	v, ok := e.Lookup(name)
	if !ok || v == "" {
		return def
	}
	x, err := conv(v)
	if err != nil {
		e.fail(fmt.Errorf("environment: %s=%q is not %s", name, v, want))
		return def
	}
	return x
}

func (e *Env) Bool(name string, def bool) bool {
	return parse(e, name, def, "a boolean (true or false)", strconv.ParseBool)
}

func (e *Env) Int(name string, def int) int {
	return parse(e, name, def, "an integer", strconv.Atoi)
}

func (e *Env) Float32(name string, def float32) float32 {
	return parse(e, name, def, "a number", func(v string) (float32, error) {
		f, err := strconv.ParseFloat(v, 32)
		return float32(f), err
	})
}

// Duration accepts Go durations ("1s", "500ms"); a bare integer is seconds, as
// several of the reference's variables are documented in seconds.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, "a duration (like 10s or 1m)", func(v string) (time.Duration, error) {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Duration(n) * time.Second, nil
		}
		return time.ParseDuration(v)
	})
}

// Map reads "k1:v1,k2:v2" (EXTRA_TAGS, additional headers).
func (e *Env) Map(name string) map[string]string {
	v, ok := e.Lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		k, val, found := strings.Cut(pair, ":")
		if !found || strings.TrimSpace(k) == "" {
			e.fail(fmt.Errorf("environment: %s: %q is not a key:value pair", name, pair))
			return nil
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out
}

// List reads a comma-separated list, dropping empty items.
func (e *Env) List(name string) []string {
	v, _ := e.Lookup(name)
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
