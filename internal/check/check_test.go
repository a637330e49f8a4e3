package check_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/check"
)

func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill func(p *check.Problems)
		want string // "" for no error
	}{
		{"none", func(p *check.Problems) {}, ""},
		{"within bounds", func(p *check.Problems) {
			p.AtLeast("workers", 1, 1)
			p.Positive("timeout", time.Nanosecond)
			p.NotNegative("refresh", 0)
			p.Add(nil)
		}, ""},
		{"count below", func(p *check.Problems) { p.AtLeast("memcache workers", 0, 1) },
			"memcache workers must be at least 1, got 0"},
		{"zero duration", func(p *check.Problems) { p.Positive("memcache timeout", 0) },
			"memcache timeout must be positive, got 0s"},
		{"negative duration", func(p *check.Problems) { p.NotNegative("redis dial timeout", -time.Second) },
			"redis dial timeout must not be negative, got -1s"},
		{"all of them, in order", func(p *check.Problems) {
			p.Addf("first %w", errors.New("wrapped"))
			p.Add(errors.New("second"))
			p.AtLeast("third", -1, 0)
		}, "first wrapped\nsecond\nthird must be at least 0, got -1"},
	} {
		var p check.Problems
		tc.fill(&p)
		err := p.Err()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
