package odata

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
)

// The per-key limits slow a client down instead of failing it. The official
// clients differ in how they pace themselves (odata-compat.md): Python
// retries a 429, JavaScript and R throw on it, and the shell client reads a
// 429 body as an empty last page. So a request that is over its key's rate,
// or that arrives while another request of its key is in flight, waits for
// its turn, in arrival order, and is served when it comes; only a request
// that cannot get its turn within PaceWait, or that finds PaceQueue others
// of its key (or PaceQueueTotal in all) already waiting, is refused with 429.
//
// A key's turn is one token: whoever holds it asks the rate limiter, and
// keeps it while it sleeps until the limiter's Retry-After, so the requests
// behind it keep their order. With Sequential the turn is kept until the
// response has been written (one request in flight per key); without, it is
// handed on as soon as the limiter said yes.
//
// Waiting costs a goroutine and a connection, nothing else: no database
// slot (those are taken after the turn), and the queues are bounded.

// errors of turns.take; each becomes an answer in Server.pace.
var (
	errQueueFull = errors.New("too many requests of this key are already waiting")
	errWaitLong  = errors.New("the request could not get its turn within the wait bound")
	errGone      = errors.New("the client went away while waiting")
	errClosing   = errors.New("the server is shutting down")
)

// turns is the per-key FIFO of requests waiting for their turn.
//
// Requests of API keys and anonymous ones (browser origins, named
// "origin:...") wait in separate room: up to total of keys', and up to
// anonTotal (half as many) of anonymous callers, whose names anyone can
// mint by changing address; so anonymous callers can never take the
// room of keys.
type turns struct {
	perKey, total, anonTotal int

	mu      sync.Mutex
	keys    map[string]*keyLine
	waiting int // requests queued, all callers
	anon    int // of them, anonymous ones
	closing chan struct{}
	closed  bool
}

// keyLine is one key's state: whether a request holds its turn, and who
// waits for it, in arrival order.
type keyLine struct {
	held    bool
	waiters []*waiter
	// spacing is the last wait the rate limiter asked of this key: with the
	// queue's length it estimates a refused request's Retry-After.
	spacing time.Duration
}

type waiter struct {
	ready  chan struct{} // closed when the turn is handed to this waiter
	handed bool          // under turns.mu
}

func newTurns(o Options) *turns {
	t := &turns{perKey: o.PaceQueue, total: o.PaceQueueTotal, anonTotal: max(o.PaceQueueTotal/2, o.PaceQueue),
		keys: map[string]*keyLine{}, closing: make(chan struct{})}
	if o.PaceWait == 0 {
		t.perKey, t.total, t.anonTotal = 0, 0, 0 // no one waits
	}
	return t
}

// anonymous says whether a caller is a browser origin (no key).
func anonymous(caller string) bool { return strings.HasPrefix(caller, "origin:") }

// full says whether the room of caller's kind is taken.
func (t *turns) full(caller string) bool {
	if anonymous(caller) {
		return t.anon >= t.anonTotal
	}
	return t.waiting-t.anon >= t.total
}

// count adds d to the waiters of caller's kind.
func (t *turns) count(caller string, d int) {
	t.waiting += d
	if anonymous(caller) {
		t.anon += d
	}
}

// take waits until key's turn is this request's. It returns nil holding
// the turn (release hands it on), or why not: errQueueFull at once,
// errWaitLong at deadline, errGone when gone is closed, errClosing on
// shutdown. retry is a Retry-After estimate for the refusals.
// gone is called only when the request has to wait.
func (t *turns) take(key string, deadline time.Time, gone func() <-chan struct{}) (retry time.Duration, err error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return time.Second, errClosing
	}
	line := t.keys[key]
	if line == nil {
		line = &keyLine{}
		t.keys[key] = line
	}
	if !line.held {
		line.held = true
		t.mu.Unlock()
		return 0, nil
	}
	if len(line.waiters) >= t.perKey || t.full(key) {
		retry = line.estimate(len(line.waiters) + 1)
		t.mu.Unlock()
		return retry, errQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	line.waiters = append(line.waiters, w)
	t.count(key, 1)
	t.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-w.ready:
		return 0, nil
	case <-timer.C:
		err = errWaitLong
	case <-gone():
		err = errGone
	case <-t.closing:
		err = errClosing
	}
	t.mu.Lock()
	if w.handed {
		// The turn came as we gave up: pass it on.
		t.mu.Unlock()
		t.release(key)
		return time.Second, err
	}
	line.remove(w)
	t.count(key, -1)
	retry = line.estimate(len(line.waiters) + 1)
	t.mu.Unlock()
	return retry, err
}

// release hands key's turn to the first waiter, or frees it.
func (t *turns) release(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	line := t.keys[key]
	if line == nil {
		return
	}
	if len(line.waiters) == 0 {
		delete(t.keys, key)
		return
	}
	w := line.waiters[0]
	line.waiters[0] = nil
	line.waiters = line.waiters[1:]
	t.count(key, -1)
	w.handed = true
	close(w.ready)
}

// spaced records the wait the rate limiter asked of key's turn holder.
func (t *turns) spaced(key string, d time.Duration) {
	t.mu.Lock()
	if line := t.keys[key]; line != nil {
		line.spacing = d
	}
	t.mu.Unlock()
}

// close wakes every waiter with errClosing; later takes get it at once.
func (t *turns) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		close(t.closing)
	}
}

// queued is how many requests wait, all keys, and the longest queue of
// one key.
func (t *turns) queued() (total, longest int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.keys {
		longest = max(longest, len(l.waiters))
	}
	return t.waiting, longest
}

func (l *keyLine) remove(w *waiter) {
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}

// estimate is how long until n more requests of the key could have had
// their turn, at least a second (Retry-After counts whole seconds).
func (l *keyLine) estimate(n int) time.Duration {
	return max(time.Duration(n)*l.spacing, time.Second)
}

// pace waits for the caller's turn and its rate limit token, and answers
// 429 or 503 itself when it cannot have them. With Sequential the turn is
// left in g, to be released when the response ends.
func (s *Server) pace(ctx *fasthttp.RequestCtx, caller string, g *grant, rec *accessRecord) bool {
	if s.limiter == nil && !s.opts.Sequential {
		return true
	}
	deadline := time.Now().Add(s.opts.PaceWait)
	var gone <-chan struct{}
	var stopWatch, endWait func()
	// watch is called only when the request is about to wait (for its
	// turn, or for its token): it is also where the wait is counted.
	watch := func() <-chan struct{} {
		if stopWatch == nil {
			stopWatch = func() {}
			endWait = s.metrics.startWait()
			if c, ok := ctx.Conn().(*stallConn); ok {
				gone, stopWatch = watchPeerClose(c.Conn)
			}
		}
		return gone
	}
	defer func() {
		if stopWatch != nil {
			stopWatch()
			endWait()
		}
	}()
	if retry, err := s.turns.take(caller, deadline, watch); err != nil {
		s.refuse(ctx, err, retry)
		return false
	}
	if ok := s.waitToken(ctx, caller, deadline, watch, rec); !ok {
		s.turns.release(caller)
		return false
	}
	if s.opts.Sequential {
		g.turn = caller
	} else {
		s.turns.release(caller)
	}
	return true
}

// waitToken asks the rate limiter, holding the caller's turn, and sleeps
// for as long as it says until it says yes, within deadline. It answers
// the request itself when it returns false.
func (s *Server) waitToken(ctx *fasthttp.RequestCtx, caller string, deadline time.Time, gone func() <-chan struct{}, rec *accessRecord) bool {
	if s.limiter == nil {
		return true
	}
	for {
		ok, retry, err := s.ask(caller, rec)
		switch {
		case err != nil:
			if s.opts.FailOpen {
				return true
			}
			s.metrics.refuse(refusedLimiterDown)
			ctx.Response.Header.Set("Retry-After", "1")
			s.fail(ctx, fasthttp.StatusServiceUnavailable, "rate limiting is unavailable; retry later")
			return false
		case ok:
			return true
		}
		retry = max(retry, time.Millisecond)
		s.turns.spaced(caller, retry)
		if time.Now().Add(retry).After(deadline) {
			s.metrics.refuse(refusedRate)
			s.tooMany(ctx, retry, "over the key's rate of requests for longer than the server waits; retry after the time in Retry-After")
			return false
		}
		timer := time.NewTimer(retry)
		select {
		case <-timer.C:
			continue
		case <-gone():
			s.refuse(ctx, errGone, 0)
		case <-s.turns.closing:
			s.refuse(ctx, errClosing, time.Second)
		}
		timer.Stop()
		return false
	}
}

// ask is one rate limit decision; a failing limiter is logged once per
// outage.
func (s *Server) ask(caller string, rec *accessRecord) (bool, time.Duration, error) {
	reqCtx, cancel := context.WithTimeout(s.base, controlTimeout)
	defer cancel()
	reqCtx, span := s.child(reqCtx, rec.span, "odata.rate_limit")
	ok, retry, err := s.limiter.Allow(reqCtx, caller)
	if err == nil {
		span.SetAttributes(attribute.Bool("odata.allowed", ok))
	}
	endSpan(span, err)
	if err != nil {
		s.metrics.limiterFailed()
		if s.limiterDown.CompareAndSwap(false, true) {
			s.log.Warn("odata: rate limiter failed; until it answers again requests are "+map[bool]string{true: "served without its limit (fail open)", false: "refused with 503"}[s.opts.FailOpen],
				"err", err)
		}
		return false, 0, err
	}
	if s.limiterDown.CompareAndSwap(true, false) {
		s.log.Info("odata: rate limiter answers again")
	}
	return ok, retry, nil
}

// refuse answers a request that did not get its turn.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, err error, retry time.Duration) {
	switch err {
	case errQueueFull:
		s.metrics.refuse(refusedQueueFull)
		s.tooMany(ctx, retry, "too many requests of this key are already waiting for their turn (2 requests a second, one at a time); retry after the time in Retry-After")
	case errWaitLong:
		s.metrics.refuse(refusedTurnTimeout)
		s.tooMany(ctx, retry, "the request could not get its key's turn within the time the server waits; retry after the time in Retry-After")
	case errGone:
		s.metrics.refuse(refusedGone)
		// No one reads the answer; the connection goes.
		ctx.SetConnectionClose()
		s.fail(ctx, fasthttp.StatusServiceUnavailable, "the client went away while waiting")
	default: // errClosing
		s.metrics.refuse(refusedClosing)
		ctx.SetConnectionClose()
		ctx.Response.Header.Set("Retry-After", "1")
		s.fail(ctx, fasthttp.StatusServiceUnavailable, "the server is shutting down; retry")
	}
}
