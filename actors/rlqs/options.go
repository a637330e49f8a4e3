package rlqs

import (
	"fmt"
	"log/slog"
	"time"

	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// Options are the Quota service's settings (SLUICE_RLQS_*).
type Options struct {
	// Alloc is how a rule's limit is divided and told (engine/rlqs).
	Alloc alloc.Options
	// Tick is how often buckets with new reports or assignments to renew
	// are served: the delay between a report and its answer.
	Tick time.Duration
	// Delivery bounds how long a message takes to reach the other end of
	// an open stream. An assignment that replaced another is taken as
	// applied once the Envoy reports on the same stream at least twice
	// this long after it was sent; until then both are counted.
	Delivery time.Duration
	// IdleAfter: a reporter whose bucket saw no request, or that stopped
	// reporting it, for this long is sent abandon_action and forgotten.
	IdleAfter time.Duration
	// MaxBuckets bounds the buckets one stream may track; a report of one
	// more gets abandon_action.
	MaxBuckets int
	// CallTimeout bounds one store call of a tick.
	CallTimeout time.Duration
	// Log receives the failures of store calls (nil: none).
	Log *slog.Logger
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log.Warn(fmt.Sprintf(format, args...))
	}
}

// DefaultOptions are the settings the service starts from. Compared with
// engine/rlqs's defaults:
//   - buckets hold 10 ms of their share (at least two tokens), since every
//     token a bucket holds is reserved on top of its rate in every window;
//   - half of what the claims leave is kept back, for new Envoys, other
//     replicas and RLS callers on the same counter;
//   - a measured demand claims 2 % more, an unknown one half the equal
//     share (room for the larger ones without waiting for cuts);
//   - a raise of 2 % is worth a new bucket (a raise costs only the new
//     bucket's tokens; small cuts the hub keeps by itself).
func DefaultOptions() Options {
	a := alloc.DefaultOptions()
	a.Burst = 10 * time.Millisecond
	a.Spare = 0.5
	a.Headroom = 0.02
	a.FirstShare = 0.5
	a.Hysteresis = 0.02
	return Options{Alloc: a, Tick: 50 * time.Millisecond, Delivery: 50 * time.Millisecond,
		IdleAfter: 30 * time.Second, MaxBuckets: 100_000, CallTimeout: time.Second}
}

// EnsureDefaults fills the fields left zero and returns o; Alloc's are
// filled as engine/rlqs does (start from DefaultOptions for this service's).
func (o *Options) EnsureDefaults() *Options {
	d := DefaultOptions()
	o.Alloc.EnsureDefaults()
	if o.Tick == 0 {
		o.Tick = d.Tick
	}
	if o.Delivery == 0 {
		o.Delivery = d.Delivery
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = d.IdleAfter
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = d.MaxBuckets
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = d.CallTimeout
	}
	return o
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	if err := o.Alloc.Validate(); err != nil {
		return err
	}
	switch {
	case o.Tick <= 0 || o.Tick > 10*time.Second:
		return fmt.Errorf("rlqs: tick %v must be in (0, 10s]", o.Tick)
	case o.Delivery <= 0:
		return fmt.Errorf("rlqs: delivery bound %v must be positive", o.Delivery)
	case o.IdleAfter < o.Alloc.MinTTL:
		return fmt.Errorf("rlqs: idle time %v must be at least the minimum TTL %v", o.IdleAfter, o.Alloc.MinTTL)
	case o.MaxBuckets < 1:
		return fmt.Errorf("rlqs: max buckets per stream %d must be at least 1", o.MaxBuckets)
	case o.CallTimeout <= 0:
		return fmt.Errorf("rlqs: call timeout %v must be positive", o.CallTimeout)
	}
	return nil
}
