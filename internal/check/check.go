// Package check collects what is wrong with a set of options, so that
// Validate reports every problem at once, each named and with the value
// given, in one wording across the backends.
package check

import (
	"errors"
	"fmt"
	"time"
)

// Problems is the list being collected; the zero value is empty.
type Problems struct{ errs []error }

// Addf adds a problem described by format and args (%w wraps an error).
func (p *Problems) Addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

// Add adds err unless it is nil.
func (p *Problems) Add(err error) {
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// AtLeast adds a problem when the count v named name is below min.
func (p *Problems) AtLeast(name string, v, min int) {
	if v < min {
		p.Addf("%s must be at least %d, got %d", name, min, v)
	}
}

// Positive adds a problem when the duration d named name is not above zero.
func (p *Problems) Positive(name string, d time.Duration) {
	if d <= 0 {
		p.Addf("%s must be positive, got %s", name, d)
	}
}

// NotNegative adds a problem when the duration d named name is below zero.
func (p *Problems) NotNegative(name string, d time.Duration) {
	if d < 0 {
		p.Addf("%s must not be negative, got %s", name, d)
	}
}

// Err is every problem joined, or nil when there is none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
