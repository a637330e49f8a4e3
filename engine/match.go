package engine

import "strings"

// match is what the config says about one request descriptor.
type match struct {
	limit *RateLimit
	// stats overrides limit.Stats when the stats key depends on the request
	// (detailed_metric, value_to_metric, a request override).
	stats *RuleStats
	// sharedValues, when non-nil, holds per entry the wildcard pattern to use
	// in the cache key instead of the request value (share_threshold).
	sharedValues []string
}

// overrideLimit is the rule of a descriptor that carries its own limit.
// An override carries no algorithm: it counts the way the rule it
// overrides does (a fixed window when no rule matches).
func (c *Config) overrideLimit(domain string, d *Descriptor) match {
	key := descriptorStatsKey(domain, d.Entries)
	rs := c.ruleStats(key)
	l := &RateLimit{FullKey: key, RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: d.Limit.Unit, Stats: rs}
	if rule, _ := c.getLimit(domain, &Descriptor{Entries: d.Entries}); rule.limit != nil && !rule.limit.Unlimited {
		l.Algorithm, l.Burst = rule.limit.Algorithm, rule.limit.Burst
	}
	return match{limit: l, stats: &rs}
}

// getLimit finds the rule for one descriptor, as the reference's GetLimit: at
// each level try key_value, then the level's wildcards in config order, then
// the bare key; a limit counts only at the descriptor's last entry.
// domainFound is false when the domain is not configured.
func (c *Config) getLimit(domain string, d *Descriptor) (m match, domainFound bool) {
	dom := c.domains[domain]
	if dom == nil {
		return match{}, false
	}
	if d.Limit != nil {
		return c.overrideLimit(domain, d), true
	}

	var (
		level         = dom
		found         *RateLimit
		perLevelStats bool      // some level asks for the request value in the stats key
		partsBuf      [8]string // stays on the stack for descriptors up to 8 deep
	)
	metricParts := partsBuf[:0]
	// key_value is built on the stack: a map lookup through string(bytes)
	// does not allocate, and most lookups end there.
	var compositeBuf [128]byte
	for i, e := range d.Entries {
		composite := append(append(append(compositeBuf[:0], e.Key...), '_'), e.Value...)
		next := level.children[string(composite)]
		if next == nil && len(level.wildcards) > 0 {
			s := string(composite)
			for _, w := range level.wildcards {
				if wildcardMatch(w, s) {
					next = level.children[w]
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.Key]
		}
		if next == nil {
			break
		}
		// The name it matched by: key_value, the wildcard pattern or key.
		matchedKey := next.name
		if next.valueToMetric {
			perLevelStats = true
			metricParts = append(metricParts, e.Key+"_"+e.Value)
		} else {
			metricParts = append(metricParts, matchedKey)
		}
		if next.shareThreshold {
			if m.sharedValues == nil {
				m.sharedValues = make([]string, len(d.Entries))
			}
			m.sharedValues[i] = next.value
		}
		if next.limit != nil && i == len(d.Entries)-1 {
			found = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	if found == nil {
		return match{}, true
	}
	m.limit = found
	switch {
	case found.DetailedMetric:
		rs := c.ruleStats(descriptorStatsKey(domain, d.Entries))
		m.stats = &rs
	case perLevelStats:
		rs := c.ruleStats(domain + "." + strings.Join(metricParts, "."))
		m.stats = &rs
	}
	return m, true
}

// ruleStats are the counters of a stats key that depends on the request.
func (c *Config) ruleStats(key string) RuleStats { return newDynamicRuleStats(c.stats, key) }

// descriptorStatsKey is "<domain>.<k1>_<v1>.<k2>" (the value left out when empty).
func descriptorStatsKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// wildcardMatch reports whether s matches pattern, where '*' stands for any
// run of characters (including none) and every other byte matches itself.
func wildcardMatch(pattern, s string) bool {
	// Iterative glob with single-star backtracking: linear in practice.
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			starP, starI = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case starP >= 0:
			starI++
			p, i = starP+1, starI
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
