package rlqssim

import (
	"errors"
	"fmt"
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Kind is what a Strategy does with a request.
type Kind int

const (
	// AllowAll lets every request through (the zero Strategy, as the
	// filter's default no_assignment_behavior).
	AllowAll Kind = iota
	// DenyAll refuses every request.
	DenyAll
	// TokenBucket admits a request when a token is left.
	TokenBucket
)

func (k Kind) String() string {
	switch k {
	case AllowAll:
		return "ALLOW_ALL"
	case DenyAll:
		return "DENY_ALL"
	case TokenBucket:
		return "token_bucket"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Strategy is a RateLimitStrategy as the filter enforces it: a blanket
// rule or a token bucket. FillInterval is whole seconds, as Envoy reads
// it; a token bucket with FillInterval 0 refills without bound.
type Strategy struct {
	Kind          Kind
	MaxTokens     uint32
	TokensPerFill uint32
	FillInterval  time.Duration
}

func (s Strategy) String() string {
	if s.Kind != TokenBucket {
		return s.Kind.String()
	}
	return fmt.Sprintf("token_bucket{max %d, %d per %v}", s.MaxTokens, s.TokensPerFill, s.FillInterval)
}

// Rate is the token bucket's refill in tokens per second (+Inf for a zero
// fill interval).
func (s Strategy) Rate() float64 {
	if s.FillInterval <= 0 {
		return math.Inf(1)
	}
	return float64(s.TokensPerFill) / s.FillInterval.Seconds()
}

// Validate refuses what the filter's config validation refuses.
func (s Strategy) Validate() error {
	switch s.Kind {
	case AllowAll, DenyAll:
		return nil
	case TokenBucket:
		if s.MaxTokens == 0 {
			return errors.New("token bucket: max_tokens must be positive")
		}
		if s.FillInterval < 0 {
			return errors.New("token bucket: negative fill interval")
		}
		return nil
	}
	return fmt.Errorf("unknown strategy kind %d", int(s.Kind))
}

// received is a strategy as it came in an assignment: fillNanos is kept
// because Envoy's equality test compares only the nanos of fill_interval.
type received struct {
	Strategy
	fillNanos int32
}

// sameBucket is Envoy's test for keeping an active token bucket: equal
// kind, max_tokens, tokens_per_fill and fill_interval nanos. Two buckets
// that differ only in fill_interval's seconds count as equal there, and
// the old bucket (with its old rate) is kept; the simulator does the same.
func (r received) sameBucket(o received) bool {
	if r.Kind != o.Kind {
		return false
	}
	if r.Kind != TokenBucket {
		return true
	}
	return r.MaxTokens == o.MaxTokens && r.TokensPerFill == o.TokensPerFill && r.fillNanos == o.fillNanos
}

// fromProto reads a RateLimitStrategy as the filter does: fill_interval
// in whole seconds (seconds and nanos together, truncated), an unset
// tokens_per_fill as 0 (the wrapper's default value: a bucket that never
// refills). requests_per_time_unit is not supported by the filter.
func fromProto(p *typev3.RateLimitStrategy) (received, error) {
	switch s := p.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if s.BlanketRule == typev3.RateLimitStrategy_DENY_ALL {
			return received{Strategy: Strategy{Kind: DenyAll}}, nil
		}
		return received{Strategy: Strategy{Kind: AllowAll}}, nil
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		fi := tb.GetFillInterval().AsDuration().Truncate(time.Second)
		out := received{Strategy: Strategy{Kind: TokenBucket, MaxTokens: tb.GetMaxTokens(), TokensPerFill: tb.GetTokensPerFill().GetValue(),
			FillInterval: fi}, fillNanos: tb.GetFillInterval().GetNanos()}
		if err := out.Validate(); err != nil {
			return received{}, err
		}
		return out, nil
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return received{}, errors.New("requests_per_time_unit is not supported by the filter")
	}
	return received{}, errors.New("strategy not set")
}
