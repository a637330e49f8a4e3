package alloc

import (
	"fmt"
	"math"
	"time"
)

// NoMatch is what a bucket that matches no rule of its domain (or whose
// domain is not configured) is told.
type NoMatch uint8

const (
	// NoMatchNone sends no assignment: the Envoy stays in its
	// no_assignment_behavior, which its operator configured for exactly
	// the case of a bucket the server has nothing for.
	NoMatchNone NoMatch = iota
	// NoMatchAllow sends ALLOW_ALL.
	NoMatchAllow
	// NoMatchDeny sends DENY_ALL.
	NoMatchDeny
)

var noMatchNames = [...]string{"none", "allow_all", "deny_all"}

func (n NoMatch) String() string {
	if int(n) < len(noMatchNames) {
		return noMatchNames[n]
	}
	return fmt.Sprintf("no_match(%d)", uint8(n))
}

// ParseNoMatch reads a NoMatch name ("" is NoMatchNone).
func ParseNoMatch(s string) (NoMatch, error) {
	if s == "" {
		return NoMatchNone, nil
	}
	for i, n := range noMatchNames {
		if n == s {
			return NoMatch(i), nil
		}
	}
	return NoMatchNone, fmt.Errorf("rlqs: no-match behaviour %q (want none, allow_all or deny_all)", s)
}

// Options are the allocation's settings.
type Options struct {
	// Floor is the least a reporter claims, as a fraction of the equal
	// share (limit / reporters): an Envoy whose demand dropped to nothing
	// still gets a trickle, so its next request is not denied for a whole
	// reporting interval while its report travels. The floors together
	// take at most Floor of the limit.
	Floor float64
	// FirstShare is the fraction of the equal share a reporter claims
	// while its demand is unknown (its first report): less than 1 keeps
	// room for the reporters whose demand turns out larger, so they need
	// not wait for the others' first assignments to be cut.
	FirstShare float64
	// Headroom is how much more than its measured demand a reporter
	// claims, as a fraction of it: a share exactly at the demand is held
	// just under it by Envoy's whole tokens and by requests arriving in
	// bunches.
	Headroom float64
	// Spare is the fraction of what the claims leave of the limit that is
	// handed out, equally, on top of the claims: an Envoy whose demand
	// grows between two reports finds room at once. 1 hands out the whole
	// limit; less keeps some back (for another replica's Envoys, say).
	Spare float64
	// Burst is how many seconds of its share an Envoy's bucket holds
	// (max_tokens), for rules that are not token buckets. Envoy refills a
	// replaced bucket, so this is also what every change of assignment
	// may let through at once.
	Burst time.Duration
	// MaxFill is the longest fill interval: a share under one request per
	// MaxFill is DENY_ALL.
	MaxFill time.Duration
	// ReportPeriod is how often an Envoy is taken to report until its
	// stream shows otherwise: Envoy's newest client reports every 5 s,
	// whatever the buckets' reporting_interval says.
	ReportPeriod time.Duration
	// Delivery bounds the time from deciding an assignment to the Envoy
	// enforcing it, on a healthy stream: an assignment is counted until
	// Delivery + TTL after it was decided, and a replaced bucket until a
	// report received two deliveries after its replacement.
	Delivery time.Duration
	// Margin is what the TTL leaves, beyond a report period and a renewal
	// period, for answering an Envoy that reopened its stream (AssignTTL).
	Margin time.Duration
	// MinTTL is the shortest assignment TTL.
	MinTTL time.Duration
	// Hysteresis: an Envoy keeps its assignment when the new one would
	// admit more, but by at most this fraction (Keep).
	Hysteresis float64
	// NoMatch is what a bucket matching no rule gets.
	NoMatch NoMatch
	// KeyOrder names, per domain, the BucketId keys in the order they are
	// matched against the domain's nested descriptors (Entries).
	KeyOrder map[string][]string
}

// MinReportPeriod is the shortest report period an Envoy may be taken to
// have: Envoy validates reporting_interval to more than 100 ms.
const MinReportPeriod = 100 * time.Millisecond

// DefaultOptions are the settings SLUICE_RLQS_* start from.
func DefaultOptions() Options {
	return Options{Floor: 0.1, FirstShare: 1, Spare: 1, Burst: time.Second, MaxFill: time.Hour,
		ReportPeriod: 5 * time.Second, Delivery: 250 * time.Millisecond, Margin: 300 * time.Millisecond,
		MinTTL: 2 * time.Second, Hysteresis: 0.05}
}

// EnsureDefaults fills the fields left zero and returns o. Floor and
// Hysteresis are taken as given, since 0 is a setting of its own for them:
// start from DefaultOptions to get theirs.
func (o *Options) EnsureDefaults() *Options {
	d := DefaultOptions()
	if o.Spare == 0 {
		o.Spare = d.Spare
	}
	if o.Burst == 0 {
		o.Burst = d.Burst
	}
	if o.MaxFill == 0 {
		o.MaxFill = d.MaxFill
	}
	if o.ReportPeriod == 0 {
		o.ReportPeriod = d.ReportPeriod
	}
	if o.Delivery == 0 {
		o.Delivery = d.Delivery
	}
	if o.Margin == 0 {
		o.Margin = d.Margin
	}
	if o.MinTTL == 0 {
		o.MinTTL = d.MinTTL
	}
	return o
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	frac := func(f float64) bool { return f >= 0 && f <= 1 && !math.IsNaN(f) }
	switch {
	case !frac(o.Floor):
		return fmt.Errorf("rlqs: floor %v must be a fraction in [0, 1]", o.Floor)
	case !frac(o.FirstShare):
		return fmt.Errorf("rlqs: first share %v must be a fraction in [0, 1]", o.FirstShare)
	case !frac(o.Headroom):
		return fmt.Errorf("rlqs: headroom %v must be a fraction in [0, 1]", o.Headroom)
	case !frac(o.Spare):
		return fmt.Errorf("rlqs: spare %v must be a fraction in [0, 1]", o.Spare)
	case !frac(o.Hysteresis) || o.Hysteresis == 1:
		return fmt.Errorf("rlqs: hysteresis %v must be a fraction in [0, 1)", o.Hysteresis)
	case o.Burst < 0:
		return fmt.Errorf("rlqs: burst %v must not be negative", o.Burst)
	case o.MaxFill < time.Second:
		return fmt.Errorf("rlqs: max fill interval %v must be at least 1s (Envoy reads whole seconds)", o.MaxFill)
	case o.ReportPeriod < MinReportPeriod:
		return fmt.Errorf("rlqs: report period %v must be at least %v", o.ReportPeriod, MinReportPeriod)
	case o.Delivery <= 0 || o.Delivery > 10*time.Second:
		return fmt.Errorf("rlqs: delivery bound %v must be in (0, 10s]", o.Delivery)
	case o.Margin < 0:
		return fmt.Errorf("rlqs: TTL margin %v must not be negative", o.Margin)
	case o.MinTTL < time.Second:
		return fmt.Errorf("rlqs: minimum TTL %v must be at least 1s (Envoy reads whole seconds)", o.MinTTL)
	case o.NoMatch > NoMatchDeny:
		return fmt.Errorf("rlqs: unknown no-match behaviour %v", o.NoMatch)
	}
	return nil
}
