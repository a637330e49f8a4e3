package actors

import (
	"errors"
	"fmt"
	"time"
)

// BatchPolicy holds the shards' knobs of the batch protocol: how long an
// open batch holds the shards (Hold, NoReleaseYield) and how a shard's
// lane turns what waits into backend calls (ParallelMin, Pipeline,
// PerSecondPipeline). How the gRPC server reads requests together and
// writes their answers is the server's own (h2grpc.Options FramesPerRead
// and WriteYieldBelow, with their defaults there). The zero value of a
// field takes its default (see DefaultBatchPolicy).
type BatchPolicy struct {
	// Hold bounds how long a shard keeps its network lanes from opening a
	// call for new arrivals while batches are open; default 250µs. A batch
	// sends within microseconds of being read, but the batches of many
	// connections may overlap without a gap for as long as load lasts, so
	// the bound is what lets a shard send at all then. It is checked when
	// a message reaches the shard, which under such load is all the time.
	Hold time.Duration
	// NoReleaseYield: the goroutine that closes the last open batch does
	// not yield once before it wakes the held shards. By default it does,
	// so that a batch read at the same moment on another connection can
	// open before the shards send, and leave in the same call.
	NoReleaseYield bool
	// ParallelMin is the smallest call (in keys) a shard opens while
	// another call of the same lane is still out; a smaller one waits for
	// that call to return and leaves with everything that piled up behind
	// it. Default 1: a call leaves at once while fewer than MaxInFlight
	// are out, and operations pile up only behind busy calls. Batches read
	// together already leave together (Hold), which is what a larger
	// minimum would buy, at the price of waiting behind a call out.
	ParallelMin int
	// Pipeline shapes the calls to the main backend; PerSecondPipeline
	// those to the per-second one. Each lane keeps its own bounds.
	Pipeline, PerSecondPipeline Pipeline
}

// DefaultBatchPolicy is the policy the zero value stands for.
func DefaultBatchPolicy() BatchPolicy {
	var p BatchPolicy
	p.EnsureDefaults()
	return p
}

// EnsureDefaults fills the zero fields with their defaults and returns p.
func (p *BatchPolicy) EnsureDefaults() *BatchPolicy {
	if p.Hold == 0 {
		p.Hold = 250 * time.Microsecond
	}
	if p.ParallelMin == 0 {
		p.ParallelMin = 1
	}
	return p
}

// Validate reports the first knob that cannot work.
func (p BatchPolicy) Validate() error {
	switch {
	case p.Hold < 0:
		return fmt.Errorf("batch policy: hold (%v) must not be negative", p.Hold)
	case p.ParallelMin < 0:
		return fmt.Errorf("batch policy: parallel minimum (%d) must not be negative", p.ParallelMin)
	}
	if err := p.Pipeline.validate(); err != nil {
		return fmt.Errorf("batch policy: pipeline: %w", err)
	}
	if err := p.PerSecondPipeline.validate(); err != nil {
		return fmt.Errorf("batch policy: per-second pipeline: %w", err)
	}
	return nil
}

// Pipeline bounds the backend calls of one lane (main or per-second).
type Pipeline struct {
	// Window is the longest a lane with no call out holds new arrivals
	// to let the call grow before sending (REDIS_PIPELINE_WINDOW); 0
	// sends at once.
	Window time.Duration
	// MaxKeys caps the keys of one backend call, counted before equal keys
	// are coalesced; 0 means no cap. This is the one place the limit is
	// enforced: backends send whatever operations they are given in one
	// call.
	MaxKeys int
}

func (p Pipeline) validate() error {
	if p.Window < 0 || p.MaxKeys < 0 {
		return fmt.Errorf("window (%v) and key limit (%d) must not be negative", p.Window, p.MaxKeys)
	}
	return nil
}

// full reports whether n pending keys fill a call.
func (p Pipeline) full(n int) bool { return p.MaxKeys > 0 && n >= p.MaxKeys }

// laneID names a shard's lane: one per backend.
type laneID uint8

const (
	laneMain      laneID = iota // the main backend
	lanePerSecond               // the per-second backend, for SECOND rules when configured
	laneCount
)

// pipeline is the bounds of lane id.
func (p *BatchPolicy) pipeline(id laneID) Pipeline {
	if id == lanePerSecond {
		return p.PerSecondPipeline
	}
	return p.Pipeline
}

// laneState is what a lane's flush decision looks at.
type laneState struct {
	pending     int  // operations waiting
	inFlight    int  // calls out
	maxInFlight int  // calls the lane may have out
	callEnded   bool // a call has just returned or the window elapsed: what waited leaves
	network     bool // calls go to workers (an open batch may hold them)
	batchOpen   bool // batches are open
	holdExpired bool // the shard has held for them for Hold already
}

// flushStep is what a lane does next.
type flushStep uint8

const (
	stepIdle   flushStep = iota // nothing waits, or no call may open
	stepSend                    // open a call with what waits
	stepHold                    // an open batch will send: wait for it (starts the hold clock)
	stepGroup                   // a call is out: ride with the next one (group commit)
	stepWindow                  // wait for the pipeline window (arms its timer)
)

// nextStep decides a lane's next step from its state alone. A returned
// call or an elapsed window sends what waits, as does a full call;
// otherwise an open batch holds network lanes (for at most Hold), a call
// out makes small calls wait for it, and a pipeline window makes the
// first call of an idle lane wait for it.
func nextStep(st laneState, parallelMin int, pl Pipeline) flushStep {
	if st.pending == 0 || st.inFlight >= st.maxInFlight {
		return stepIdle
	}
	if st.callEnded || pl.full(st.pending) {
		return stepSend
	}
	switch {
	case st.network && st.batchOpen && !st.holdExpired:
		return stepHold
	case st.inFlight > 0 && st.pending < parallelMin:
		return stepGroup
	case pl.Window > 0 && st.inFlight == 0:
		return stepWindow
	}
	return stepSend
}

var errNoBackend = errors.New("actors: a Backend is required")
