package h2grpc

// Dispatch: complete calls handed to workers, alone or as a batch, and
// run there.

import (
	"context"
	"errors"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// endOfRead dispatches the calls read so far. A PING acknowledgement
// queued since the last write goes out in the next write, which the first
// of their answers makes: one write instead of two (grpc-go's clients send
// a PING with every batch of calls once answers flow). With no calls to
// carry it, it is written now.
func (c *conn) endOfRead() {
	c.framesRead = 0
	owed := c.ackOwed
	c.ackOwed = false
	if len(c.ready) > 0 {
		c.dispatchReady() // every answer's finish writes, reset or not
		return
	}
	if owed {
		c.mu.Lock()
		c.flushLocked()
		c.mu.Unlock()
	}
}

// dispatchReady hands the complete unary calls read since the last time to
// workers: two or more of a batch method go to one worker as a batch, the
// others one per worker.
func (c *conn) dispatchReady() {
	if len(c.ready) > 1 {
		c.dispatchBatch()
	}
	for i, st := range c.ready {
		c.s.dispatch(st)
		c.ready[i] = nil
	}
	c.ready = c.ready[:0]
}

// dispatchBatch takes out of ready the calls of the first batch method
// among them, if it has two or more, and gives them to one worker.
func (c *conn) dispatchBatch() {
	path := ""
	n := 0
	for _, st := range c.ready {
		if st.batch != nil && (path == "" || st.path == path) {
			path = st.path
			n++
		}
	}
	if n < 2 {
		return
	}
	group := make([]*stream, 0, n)
	rest := c.ready[:0]
	for _, st := range c.ready {
		if st.batch != nil && st.path == path {
			group = append(group, st)
		} else {
			rest = append(rest, st)
		}
	}
	clear(c.ready[len(rest):])
	c.ready = rest
	st := group[0]
	// Before the batch waits for a worker: what serves it may start
	// getting ready (the rate limit service opens its batch here).
	st.group, st.serve = group, st.batch()
	c.s.dispatch(st)
}

// fail answers st with a status before its method runs and drops its
// request.
func (c *conn) fail(st *stream, ended bool, code codes.Code, msg string) {
	c.release(st)
	st.method, st.streaming, st.bidi = nil, nil, nil
	c.finish(st, nil, code, msg)
	if !ended {
		c.resetStream(st.id, http2.ErrCodeNo) // the rest is not needed
	}
}

// run is a worker running st's method and answering it.
func (c *conn) run(st *stream) {
	if st.group != nil {
		c.runBatch(st.group)
		return
	}
	defer c.calls.Done()
	switch {
	case st.streaming != nil:
		c.runStream(st)
		return
	case st.bidi != nil:
		c.runBidi(st)
		return
	}
	ctx := c.ctx
	var cancel context.CancelFunc
	if !st.deadline.IsZero() {
		if ctx, cancel = context.WithDeadline(ctx, st.deadline); ctx.Err() != nil {
			// Past its deadline already: not run, so nothing is counted.
			cancel()
			c.release(st)
			c.finish(st, nil, codes.DeadlineExceeded, expiredMsg)
			return
		}
	}
	out := getBuf(256)
	resp, err := st.method(ctx, (*st.msg)[5:], append((*out)[:0], 0, 0, 0, 0, 0))
	c.release(st)
	answer, code, desc := answerOf(resp, err)
	if cancel != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The client has given up: whatever the method made of it,
			// the call is over.
			answer, code, desc = nil, codes.DeadlineExceeded, expiredMsg
		}
		cancel()
	}
	c.finish(st, answer, code, desc)
	if cap(resp) > 0 {
		*out = resp[:0]
	}
	putBuf(out)
}

// runBatch is a worker running a batch method for sts and answering them
// in one write.
func (c *conn) runBatch(sts []*stream) {
	defer c.calls.Add(-len(sts))
	run, ctx, cancel, expiry := c.batchDeadlines(c.ctx, sts)
	calls := make([]Call, len(run))
	outs := make([]*[]byte, len(run))
	for i, st := range run {
		outs[i] = getBuf(256)
		calls[i] = Call{In: (*st.msg)[5:], Out: append((*outs[i])[:0], 0, 0, 0, 0, 0)}
	}
	sts[0].serve(ctx, calls) // also with no calls: it was promised them
	cancel()
	for _, st := range sts {
		c.release(st)
	}
	var now time.Time // when the results came, if a call has a deadline
	c.mu.Lock()
	expiry.stopLocked()
	for i, st := range run {
		// Nothing is written until every answer is queued: one write
		// carries them all, unless they pass the output bound.
		for !c.dead && len(c.out) > c.s.o.MaxOutput {
			c.flushLocked()
			c.cond.Wait()
		}
		if st.answered {
			continue
		}
		resp, code, msg := answerOf(calls[i].Out, calls[i].Err)
		if !st.deadline.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if !now.Before(st.deadline) {
				resp, code, msg = nil, codes.DeadlineExceeded, expiredMsg
			}
		}
		c.answerLocked(st, resp, code, msg)
	}
	for _, st := range sts {
		if st.answered {
			c.endLocked(st) // its status went out before
		}
	}
	c.flushWholeLocked() // every answer of the batch is queued
	c.mu.Unlock()
	for i, call := range calls {
		if cap(call.Out) > 0 {
			*outs[i] = call.Out[:0]
		}
		putBuf(outs[i])
	}
}
