package quota

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/sluicehq/sluice/engine/memory"
	"log/slog"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// Refusal is what a bucket beyond the caps is told.
type Refusal uint8

const (
	// RefuseDeny sends DENY_ALL: the bucket's requests are refused, and
	// never counted past the limit.
	RefuseDeny Refusal = iota
	// RefuseAllow sends ALLOW_ALL: the bucket's requests pass, unlimited.
	RefuseAllow
)

// ParseRefusal reads a Refusal name ("" is deny_all).
func ParseRefusal(s string) (Refusal, error) {
	switch s {
	case "", "deny_all":
		return RefuseDeny, nil
	case "allow_all":
		return RefuseAllow, nil
	}
	return RefuseDeny, fmt.Errorf("rlqs: refused-bucket behaviour %q (want deny_all or allow_all)", s)
}

func (r Refusal) String() string {
	if r == RefuseAllow {
		return "allow_all"
	}
	return "deny_all"
}

// Options are the Quota service's settings (SLUICE_RLQS_*).
type Options struct {
	// Alloc is how a rule's limit is divided and told (engine/alloc).
	Alloc alloc.Options
	// Shards is how many goroutines own the buckets (by the hash of the
	// domain and BucketId); 0: GOMAXPROCS.
	Shards int
	// IdleAfter: a reporter whose bucket saw no request, or that stopped
	// reporting it, for this long is sent abandon_action and forgotten.
	IdleAfter time.Duration
	// MaxBuckets bounds the buckets one stream may track, and MaxReporters
	// the (stream, bucket) pairs of the whole service: a bucket beyond
	// either is refused (Refused, for RefusedTTL), once, not tracked.
	MaxBuckets   int
	MaxReporters int
	// Budget, when set, is charged ReporterBytes for each reporter, so
	// that the quota service's state counts in the process's memory cap
	// (SLUICE_MEMORY_MAX_BYTES, shared with the memory backend's
	// counters): a bucket that does not fit is refused as one beyond
	// MaxReporters is.
	Budget     *memory.Budget
	Refused    Refusal
	RefusedTTL time.Duration
	// Replica names this replica on the Board (a random name when empty).
	Replica string
	// CallTimeout bounds one store call.
	CallTimeout time.Duration
	// Clock is the time source (time.Now when nil): tests drive the
	// service on a clock of their own.
	Clock func() time.Time
	// Log receives the failures of store calls (nil: none).
	Log *slog.Logger
	// Observe, when set, is shown each plan of a bucket (for simulations
	// and debugging; it must not keep in or out).
	Observe func(bucket string, in *alloc.Input, out *alloc.Output)
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log.Warn(fmt.Sprintf(format, args...))
	}
}

// DefaultOptions are the settings the service starts from. Compared with
// engine/alloc's defaults:
//   - buckets hold 10 ms of their share (at least two tokens; √demand
//     for Envoys whose share meets their demand), since every token a
//     bucket holds is reserved on top of its rate in every window;
//   - half of what the claims leave is kept back, for new Envoys, other
//     replicas and RLS callers on the same counter;
//   - a measured demand claims 2 % more, an unknown one half the equal
//     share (room for the larger ones without waiting for cuts);
//   - a raise of 2 % is worth a new bucket.
func DefaultOptions() Options {
	a := alloc.DefaultOptions()
	a.Burst = 10 * time.Millisecond
	a.Spare = 0.5
	a.Headroom = 0.02
	a.FirstShare = 0.5
	a.Hysteresis = 0.02
	return Options{Alloc: a, IdleAfter: 30 * time.Second, MaxBuckets: 100_000, MaxReporters: 1_000_000,
		RefusedTTL: time.Hour, CallTimeout: time.Second}
}

// EnsureDefaults fills the fields left zero and returns o; Alloc's are
// filled as engine/alloc does (start from DefaultOptions for this
// service's).
func (o *Options) EnsureDefaults() *Options {
	d := DefaultOptions()
	o.Alloc.EnsureDefaults()
	if o.Shards == 0 {
		o.Shards = runtime.GOMAXPROCS(0)
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = d.IdleAfter
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = d.MaxBuckets
	}
	if o.MaxReporters == 0 {
		o.MaxReporters = d.MaxReporters
	}
	if o.RefusedTTL == 0 {
		o.RefusedTTL = d.RefusedTTL
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Replica = hex.EncodeToString(b[:])
	}
	return o
}

// ReporterBytes is what one reporter (a stream's bucket) and its share of
// its hub take on the heap, measured by BenchmarkReporterMemory (about
// 2.5 KB beside the counters) and rounded up.
const ReporterBytes = 3 << 10

// MaxReportersIn is how many reporters fit in bytes.
func MaxReportersIn(bytes int64) int { return int(max(bytes/ReporterBytes, 1)) }

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	if err := o.Alloc.Validate(); err != nil {
		return err
	}
	switch {
	case o.Shards < 0 || o.Shards > 1024:
		return fmt.Errorf("rlqs: %d shards, want 0 (one per CPU) to 1024", o.Shards)
	case o.IdleAfter < o.Alloc.AssignTTL(0):
		return fmt.Errorf("rlqs: idle time %v must be at least an assignment's TTL (%v)", o.IdleAfter, o.Alloc.AssignTTL(0))
	case o.MaxBuckets < 1:
		return fmt.Errorf("rlqs: max buckets per stream %d must be at least 1", o.MaxBuckets)
	case o.MaxReporters < 1:
		return fmt.Errorf("rlqs: max reporters %d must be at least 1", o.MaxReporters)
	case o.Refused > RefuseAllow:
		return fmt.Errorf("rlqs: unknown refused-bucket behaviour %d", o.Refused)
	case o.RefusedTTL < time.Second:
		return fmt.Errorf("rlqs: refused-bucket TTL %v must be at least 1s (Envoy reads whole seconds)", o.RefusedTTL)
	case o.CallTimeout <= 0:
		return fmt.Errorf("rlqs: call timeout %v must be positive", o.CallTimeout)
	}
	return nil
}
