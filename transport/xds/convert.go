package xds

import (
	"fmt"
	"sort"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/engine"
)

// ToDomainConfig converts one RateLimitConfig to the rule model the YAML
// files also become. The unit becomes its name (UNKNOWN when unset or out of
// range), so the engine's validation reports it as the reference does.
func ToDomainConfig(c *rlsconf.RateLimitConfig) engine.DomainConfig {
	return engine.DomainConfig{Domain: c.GetDomain(), Descriptors: descriptors(c.GetDescriptors())}
}

func descriptors(in []*rlsconf.RateLimitDescriptor) []engine.DescriptorConfig {
	if len(in) == 0 {
		return nil
	}
	out := make([]engine.DescriptorConfig, 0, len(in))
	for _, d := range in {
		dc := engine.DescriptorConfig{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			Descriptors:    descriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
		}
		if p := d.GetRateLimit(); p != nil {
			rl := &engine.RateLimitConfig{
				RequestsPerUnit: p.GetRequestsPerUnit(),
				Unlimited:       p.GetUnlimited(),
				Name:            p.GetName(),
			}
			// By number: the reference's proto also has MONTH, YEAR and WEEK,
			// which this Go module's enum lacks but the engine knows.
			rl.Unit = engine.Unit(p.GetUnit()).String()
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, engine.ReplacesConfig{Name: r.GetName()})
			}
			dc.RateLimit = rl
		}
		out = append(out, dc)
	}
	return out
}

// toFiles unmarshals every resource of a response, in name order so that
// the same set always loads (and fails) the same way.
func toFiles(resources []*anypb.Any) ([]engine.ConfigFile, error) {
	files := make([]engine.ConfigFile, 0, len(resources))
	for i, res := range resources {
		var c rlsconf.RateLimitConfig
		if err := res.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, res.GetTypeUrl(), err)
		}
		dc := ToDomainConfig(&c)
		files = append(files, engine.ConfigFile{Name: c.GetName(), Domain: &dc})
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}
