package config

// YamlRoot is one rule file.
type YamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []YamlDescriptor `yaml:"descriptors"`
}

// YamlDescriptor is one node of the descriptor tree.
type YamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *YamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []YamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	QuotaMode      bool             `yaml:"quota_mode"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
}

// YamlRateLimit is a node's rate_limit block. Algorithm, Burst and
// Counting are sluice's extension.
type YamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	Algorithm       string         `yaml:"algorithm"`
	Burst           *uint32        `yaml:"burst"`
	Counting        string         `yaml:"counting"`
}

// yamlReplaces is unexported as in the reference, where the error texts
// read "[]config.yamlReplaces"; its field is readable through Replaces.
type yamlReplaces struct {
	Name string `yaml:"name"`
}

// ReplacesNames lists the names in r's replaces entries, in order.
func (r *YamlRateLimit) ReplacesNames() []string {
	if r.Replaces == nil {
		return nil
	}
	out := make([]string, len(r.Replaces))
	for i, e := range r.Replaces {
		out[i] = e.Name
	}
	return out
}
