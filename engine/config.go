package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"

	"github.com/sluicehq/sluice/engine/internal/config"
	"github.com/sluicehq/sluice/engine/stats"
)

// DomainConfig is one configuration file (or one xDS RateLimitConfig) in
// model form. YAML and xDS both land here before validation.
type DomainConfig struct {
	Domain      string             `yaml:"domain"`
	Descriptors []DescriptorConfig `yaml:"descriptors"`
}

// DescriptorConfig is one node of the descriptor tree.
type DescriptorConfig struct {
	Key            string             `yaml:"key"`
	Value          string             `yaml:"value"`
	RateLimit      *RateLimitConfig   `yaml:"rate_limit"`
	Descriptors    []DescriptorConfig `yaml:"descriptors"`
	ShadowMode     bool               `yaml:"shadow_mode"`
	DetailedMetric bool               `yaml:"detailed_metric"`
	QuotaMode      bool               `yaml:"quota_mode"`
	ValueToMetric  bool               `yaml:"value_to_metric"`
	ShareThreshold bool               `yaml:"share_threshold"`
	Metadata       map[string]any     `yaml:"metadata"`
}

// RateLimitConfig is the rate_limit block of a node.
type RateLimitConfig struct {
	RequestsPerUnit uint32           `yaml:"requests_per_unit"`
	Unit            string           `yaml:"unit"`
	Unlimited       bool             `yaml:"unlimited"`
	Name            string           `yaml:"name"`
	Replaces        []ReplacesConfig `yaml:"replaces"`
	// Algorithm and Burst are sluice's extension (see Algorithm): empty is
	// the reference's fixed window. Burst is nil when left out (the bucket
	// then holds requests_per_unit), so that an explicit 0 is refused
	// rather than taken for the default.
	Algorithm string  `yaml:"algorithm"`
	Burst     *uint32 `yaml:"burst"`
	// Counting is sluice's extension too: exact, lease, or empty for the
	// service's default (SLUICE_COUNTING).
	Counting string `yaml:"counting"`
}

// ReplacesConfig names a rule that this one replaces.
type ReplacesConfig struct {
	Name string `yaml:"name"`
}

// ConfigFile is one source of rules: YAML text, or (from xDS) a domain already
// in model form.
type ConfigFile struct {
	Name   string
	YAML   []byte
	Domain *DomainConfig // when set, YAML is not read
}

// ConfigOptions are the settings that change how files combine.
type ConfigOptions struct {
	// MergeDomains lets several files share one domain (MERGE_DOMAIN_CONFIG).
	MergeDomains bool
	// Stats receives the per-rule counters; a private store is used when nil.
	Stats *stats.Store
}

// ConfigError is a configuration that cannot be loaded. Its text is the
// reference's: "<config name>: <message>".
type ConfigError struct {
	Name string
	Msg  string
}

func (e *ConfigError) Error() string { return e.Name + ": " + e.Msg }

// validKeys are the only mapping keys a rate limit YAML file may use, at any depth.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
	// sluice's extension (the reference's loader rejects them).
	"algorithm": true, "burst": true, "counting": true,
}

// ParseYAML reads one YAML file into the model with the reference's decoder
// (yaml.v2: YAML 1.1 scalars such as unquoted yes/no, the last of duplicate
// keys wins, unquoted dates stay text) and its checks and error texts: a
// generic pass that validates every key, then a typed pass. On top, a known
// key in the wrong place (unit: at the top level, say) is an error here,
// where the reference would silently ignore it.
func ParseYAML(name string, data []byte) (*DomainConfig, error) {
	generic, msg := parseGeneric(data) // yamlcheck.go: and validateKeys
	if msg != "" {
		return nil, &ConfigError{name, msg}
	}
	if msg := checkPlaces(generic, rootKeys, "the top level"); msg != "" {
		return nil, &ConfigError{name, msg}
	}
	var root config.YamlRoot
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &ConfigError{name, "error loading config file: " + describeYAMLError(data, err)}
	}
	return &DomainConfig{Domain: root.Domain, Descriptors: fromYAML(root.Descriptors)}, nil
}

// fromYAML turns decoded descriptors into the model.
func fromYAML(ds []config.YamlDescriptor) []DescriptorConfig {
	if ds == nil {
		return nil
	}
	out := make([]DescriptorConfig, len(ds))
	for i, d := range ds {
		out[i] = DescriptorConfig{Key: d.Key, Value: d.Value, Descriptors: fromYAML(d.Descriptors),
			ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode,
			ValueToMetric: d.ValueToMetric, ShareThreshold: d.ShareThreshold, Metadata: d.Metadata}
		if r := d.RateLimit; r != nil {
			rl := &RateLimitConfig{RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Unlimited: r.Unlimited,
				Name: r.Name, Algorithm: r.Algorithm, Burst: r.Burst, Counting: r.Counting}
			for _, n := range r.ReplacesNames() {
				rl.Replaces = append(rl.Replaces, ReplacesConfig{Name: n})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}

// validateKeys is the reference's key check, in the order yaml.v2 hands the
// keys over (sorted here, so that a file with several problems always
// reports the same one). metadata is free-form and not checked.
func validateKeys(m map[any]any) string {
	keys := make([]any, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		ks, ok := k.(string)
		if !ok {
			return fmt.Sprintf("config error, key is not of type string: %v", k)
		}
		if !validKeys[ks] {
			return fmt.Sprintf("config error, unknown key '%s'", ks)
		}
		if ks == "metadata" {
			continue
		}
		switch v := m[k].(type) {
		case []any:
			for _, e := range v {
				em, ok := e.(map[any]any)
				if !ok {
					return fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)
				}
				if msg := validateKeys(em); msg != "" {
					return msg
				}
			}
		case map[any]any:
			if msg := validateKeys(v); msg != "" {
				return msg
			}
		case string, int, bool, nil:
		default:
			return badLeaf(ks, v) // yamlcheck.go
		}
	}
	return ""
}

// The keys each kind of mapping may hold; validKeys is their union.
var (
	rootKeys       = placeKeys{"domain": nil, "descriptors": descriptorKeys}
	descriptorKeys = placeKeys{}
	rateLimitKeys  = placeKeys{"requests_per_unit": nil, "unit": nil, "unlimited": nil, "name": nil, "replaces": replacesKeys, "algorithm": nil, "burst": nil, "counting": nil}
	replacesKeys   = placeKeys{"name": nil}
)

// placeKeys maps a key to the keys of the mappings below it (nil: a leaf).
type placeKeys map[string]placeKeys

func init() {
	for _, k := range []string{"key", "value", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "metadata"} {
		descriptorKeys[k] = nil
	}
	descriptorKeys["descriptors"] = descriptorKeys
	descriptorKeys["rate_limit"] = rateLimitKeys
}

// checkPlaces reports a valid key used where the reference's decoder would
// drop it. It runs after validateKeys, so every key is a known string.
func checkPlaces(m map[any]any, allowed placeKeys, where string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k.(string))
	}
	sort.Strings(keys)
	for _, k := range keys {
		below, ok := allowed[k]
		if !ok {
			return fmt.Sprintf("config error, key '%s' is not valid at %s", k, where)
		}
		if below == nil {
			continue
		}
		inner := "'" + k + "'"
		switch v := m[k].(type) {
		case map[any]any:
			if msg := checkPlaces(v, below, inner); msg != "" {
				return msg
			}
		case []any:
			for _, e := range v {
				if msg := checkPlaces(e.(map[any]any), below, inner); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

// Config is a loaded, validated rule set. It is immutable; a reload builds a
// new one and swaps it in.
type Config struct {
	domains map[string]*node
	stats   *stats.Store
	// limits are every rule, so that a reload can release the statistics
	// of the rules it removed.
	limits []*RateLimit
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key" or "key_value"
	wildcards []string         // child keys whose value contains '*', in config order
	limit     *RateLimit
	key       string // the config key and value this node was declared with
	value     string
	name      string // its name in its parent's children: key, or key_value
	// valueToMetric and shareThreshold are per-level flags, used while walking.
	valueToMetric  bool
	shareThreshold bool
}

// RateLimit is a rule that matched. Its fields are read-only once loaded.
type RateLimit struct {
	FullKey         string // stats key: domain.key_value.key2 (sanitized)
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
	Unlimited       bool
	ShadowMode      bool
	QuotaMode       bool
	DetailedMetric  bool
	Replaces        []string
	Metadata        map[string]any
	Stats           RuleStats
	// Algorithm is how the rule counts; Burst is a token bucket's capacity
	// (0: requests_per_unit).
	Algorithm Algorithm
	Burst     uint32
	// Counting is how the rule's hits reach the shared counters
	// (CountDefault: the service's Options.Counting).
	Counting Counting
	// current is what every decision under this rule reports as its
	// current limit, made once with the rule (statuses only read it); nil
	// for a RateLimit made elsewhere, which decide then describes itself.
	current *CurrentLimit
}

// RuleStats are the counters of one stats key.
type RuleStats struct {
	TotalHits               *stats.Counter
	OverLimit               *stats.Counter
	NearLimit               *stats.Counter
	OverLimitWithLocalCache *stats.Counter
	WithinLimit             *stats.Counter
	ShadowMode              *stats.Counter
}

// ruleStatSuffixes are the counters of one stats key, in RuleStats order.
var ruleStatSuffixes = [...]string{"total_hits", "over_limit", "near_limit", "over_limit_with_local_cache", "within_limit", "shadow_mode"}

// OverflowStatsKey is the stats key counting, together, the request-named
// keys (detailed_metric, value_to_metric, request overrides, unknown
// domains) past the store's bound on such names.
const OverflowStatsKey = "_overflow"

func ruleStatPrefix(key string) string {
	return "ratelimit.service.rate_limit." + stats.SanitizeName(key) + "."
}

// NewRuleStats resolves the counters of a stats key such as "probe.k_two".
func NewRuleStats(s *stats.Store, key string) RuleStats {
	p := ruleStatPrefix(key)
	var c [len(ruleStatSuffixes)]*stats.Counter
	for i, suf := range ruleStatSuffixes {
		c[i] = s.Counter(p + suf)
	}
	return RuleStats{c[0], c[1], c[2], c[3], c[4], c[5]}
}

// newDynamicRuleStats are the counters of a stats key a request named: they
// are bounded in number and released when idle (stats.Store.DynamicCounter).
func newDynamicRuleStats(s *stats.Store, key string) RuleStats {
	p, o := ruleStatPrefix(key), ruleStatPrefix(OverflowStatsKey)
	var c [len(ruleStatSuffixes)]*stats.Counter
	for i, suf := range ruleStatSuffixes {
		c[i] = s.DynamicCounter(p+suf, o+suf)
	}
	return RuleStats{c[0], c[1], c[2], c[3], c[4], c[5]}
}

// releaseRemoved releases the statistics of the rules of c that next does
// not have (a reload removed them), so they do not stay forever.
func (c *Config) releaseRemoved(next *Config) {
	keep := map[string]bool{}
	if next != nil && next.stats == c.stats {
		for _, l := range next.limits {
			keep[l.FullKey] = true
		}
	}
	var names []string
	for _, l := range c.limits {
		if keep[l.FullKey] {
			continue
		}
		p := ruleStatPrefix(l.FullKey)
		for _, suf := range ruleStatSuffixes {
			names = append(names, p+suf)
		}
	}
	c.stats.Release(names...)
}

// LoadConfig validates and combines files into one Config. The first problem
// found is returned as a *ConfigError.
func LoadConfig(files []ConfigFile, opts ConfigOptions) (*Config, error) {
	st := opts.Stats
	if st == nil {
		st = stats.NewStore()
	}
	c := &Config{domains: map[string]*node{}, stats: st}
	for _, f := range files {
		root := f.Domain
		if root == nil {
			var err error
			if root, err = ParseYAML(f.Name, f.YAML); err != nil {
				return nil, err
			}
		}
		if root.Domain == "" {
			return nil, &ConfigError{f.Name, "config file cannot have empty domain"}
		}
		dom, present := c.domains[root.Domain]
		if present && !opts.MergeDomains {
			return nil, &ConfigError{f.Name, fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
		}
		if !present {
			dom = &node{children: map[string]*node{}}
		}
		if err := c.loadDescriptors(f.Name, dom, root.Domain+".", root.Descriptors); err != nil {
			return nil, err
		}
		c.domains[root.Domain] = dom
	}
	// Only a configuration that loads gets statistics: a rejected one
	// leaves no counters behind in the store.
	for _, l := range c.limits {
		l.Stats = NewRuleStats(st, l.FullKey)
	}
	return c, nil
}

func (c *Config) loadDescriptors(file string, parent *node, parentKey string, descs []DescriptorConfig) error {
	for _, d := range descs {
		if d.Key == "" {
			return &ConfigError{file, "descriptor has empty key"}
		}
		finalKey := d.Key
		if d.Value != "" {
			finalKey += "_" + d.Value
		}
		fullKey := parentKey + finalKey
		if _, dup := parent.children[finalKey]; dup {
			return &ConfigError{file, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey)}
		}
		n := &node{
			children:       map[string]*node{},
			key:            d.Key,
			value:          d.Value,
			name:           finalKey,
			valueToMetric:  d.ValueToMetric,
			shareThreshold: d.ShareThreshold,
		}
		if d.RateLimit != nil {
			rl, err := c.newRateLimit(file, fullKey, d)
			if err != nil {
				return err
			}
			n.limit = rl
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			return &ConfigError{file, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)}
		}
		if err := c.loadDescriptors(file, n, fullKey+".", d.Descriptors); err != nil {
			return err
		}
		parent.children[finalKey] = n
		if strings.Contains(d.Value, "*") {
			parent.wildcards = append(parent.wildcards, finalKey)
		}
	}
	return nil
}

func (c *Config) newRateLimit(file, fullKey string, d DescriptorConfig) (*RateLimit, error) {
	r := d.RateLimit
	unit, valid := ParseUnit(r.Unit)
	if r.Unlimited {
		if valid {
			return nil, &ConfigError{file, "should not specify rate limit unit when unlimited"}
		}
	} else if !valid {
		return nil, &ConfigError{file, fmt.Sprintf("invalid rate limit unit '%s'", r.Unit)}
	}
	algo, ok := ParseAlgorithm(r.Algorithm)
	switch {
	case !ok:
		return nil, &ConfigError{file, fmt.Sprintf("invalid rate limit algorithm '%s' (want fixed_window, sliding_window or token_bucket)", r.Algorithm)}
	case r.Unlimited && r.Algorithm != "":
		return nil, &ConfigError{file, "should not specify rate limit algorithm when unlimited"}
	case r.Burst != nil && algo != TokenBucket:
		return nil, &ConfigError{file, fmt.Sprintf("burst is only valid with algorithm token_bucket, not %s", algo)}
	case r.Burst != nil && *r.Burst == 0:
		// A bucket that holds nothing admits nothing: requests_per_unit 0
		// says that plainly; burst 0 is far more likely a mistake.
		return nil, &ConfigError{file, fmt.Sprintf("burst of token bucket rule '%s' must be at least 1 (leave it out for requests_per_unit)", fullKey)}
	}
	counting, err := ruleCounting(file, r)
	if err != nil {
		return nil, err
	}
	var burst uint32
	if r.Burst != nil {
		burst = *r.Burst
	}
	replaces := make([]string, 0, len(r.Replaces))
	for _, rep := range r.Replaces {
		if rep.Name == "" {
			return nil, &ConfigError{file, "should not have an empty replaces entry"}
		}
		if rep.Name == r.Name {
			return nil, &ConfigError{file, "replaces should not contain name of same descriptor"}
		}
		replaces = append(replaces, rep.Name)
	}
	md, err := normalizeMetadata(d.Metadata)
	if err != nil {
		return nil, &ConfigError{file, "error parsing metadata: " + err.Error()}
	}
	rl := &RateLimit{
		FullKey:         fullKey,
		RequestsPerUnit: r.RequestsPerUnit,
		Unit:            unit,
		Name:            r.Name,
		Unlimited:       r.Unlimited,
		ShadowMode:      d.ShadowMode,
		QuotaMode:       d.QuotaMode,
		DetailedMetric:  d.DetailedMetric,
		Replaces:        replaces,
		Metadata:        md,
		Algorithm:       algo,
		Burst:           burst,
		Counting:        counting,
	}
	rl.current = &CurrentLimit{RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit, Name: rl.Name}
	c.limits = append(c.limits, rl)
	return rl, nil
}

// normalizeMetadata checks that metadata converts to a protobuf Struct (string
// keys; null, bool, number, string, list and map values) and returns it with
// every nested map keyed by string.
func normalizeMetadata(m map[string]any) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		nv, err := normalizeValue(v)
		if err != nil {
			return nil, err
		}
		out[k] = nv
	}
	return out, nil
}

func normalizeValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string, float64:
		return v, nil
	case int:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case float32:
		return float64(v), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			ne, err := normalizeValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = ne
		}
		return out, nil
	case map[string]any:
		return normalizeMetadata(v)
	case map[any]any:
		sm := make(map[string]any, len(v))
		for k, e := range v {
			var ks string
			switch k := k.(type) {
			case string:
				ks = k
			case bool:
				// yaml.v2 reads an unquoted true/false/yes/no key as a
				// boolean; the reference takes it as its text.
				ks = strconv.FormatBool(k)
			default:
				return nil, fmt.Errorf("invalid key type: %T", k)
			}
			sm[ks] = e
		}
		return normalizeMetadata(sm)
	default:
		return nil, fmt.Errorf("invalid type: %T", v)
	}
}

// Domains lists the loaded domain names, sorted.
func (c *Config) Domains() []string { return slices.Sorted(maps.Keys(c.domains)) }

// Dump is the /rlconfig text: one line per descriptor that has a rate_limit,
// "<fullKey>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <b>, quota_mode: <b>".
// Unlike the reference it is sorted, so two dumps of one config compare equal.
func (c *Config) Dump() string {
	var lines []string
	var walk func(n *node)
	walk = func(n *node) {
		if n.limit != nil {
			l := n.limit
			unit := l.Unit.String()
			line := fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t",
				escapeControl(l.FullKey), unit, l.RequestsPerUnit, l.ShadowMode, l.QuotaMode)
			// Fixed-window lines stay the reference's; the extension is appended.
			switch l.Algorithm {
			case SlidingWindow:
				line += ", algorithm: sliding_window"
			case TokenBucket:
				line += fmt.Sprintf(", algorithm: token_bucket, burst: %d", bucketBurst(l, l.RequestsPerUnit, bucketInterval(l.RequestsPerUnit, l.Unit)))
			}
			if l.Counting != CountDefault {
				line += ", counting: " + l.Counting.String()
			}
			lines = append(lines, line)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
