package odata

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// controlTimeout bounds the key check and the rate limit decision, which
// are not part of the query's budget.
const controlTimeout = 10 * time.Second

var (
	jsonType      = "application/json; charset=utf-8"
	csvType       = "text/csv; charset=utf-8; header=present"
	bodyNullMsg   = []byte(`{"message":null}`)
	bodyUnauth    = []byte(`{"message":"Unauthorized"}`)
	bodyForbidden = []byte(`{"message":"Forbidden"}`)
)

// targetKind is what a path under Root names.
type targetKind uint8

const (
	targetCollection targetKind = iota // /Observations
	targetRoot                         // / (the service document)
	targetMetadata                     // /$metadata
	targetCount                        // /Observations/$count
	targetEntity                       // /Observations(1), /Metadata('<uuid>')
)

type target struct {
	kind targetKind
	coll *query.Collection
	key  string // targetEntity: the text between the parentheses
}

// label names the target in metrics and spans: its collection, or one of
// a few fixed names.
func (t target) label() string {
	switch {
	case t.coll != nil:
		return t.coll.Name
	case t.kind == targetRoot:
		return "service"
	case t.kind == targetMetadata:
		return "$metadata"
	}
	return "none"
}

func (s *Server) route(path []byte) (target, bool) {
	rest, found := bytes.CutPrefix(path, []byte(s.opts.Root))
	if !found {
		return target{}, false
	}
	if len(rest) == 0 || string(rest) == "/" {
		return target{kind: targetRoot}, true
	}
	if rest[0] != '/' {
		return target{}, false
	}
	seg := string(rest[1:])
	if seg == "$metadata" {
		return target{kind: targetMetadata}, true
	}
	t := target{kind: targetCollection}
	if name, ok := strings.CutSuffix(seg, "/$count"); ok {
		t.kind, seg = targetCount, name
	} else if open := strings.IndexByte(seg, '('); open > 0 && strings.HasSuffix(seg, ")") {
		t.kind, t.key, seg = targetEntity, seg[open+1:len(seg)-1], seg[:open]
	}
	c, ok := query.Collections[seg]
	t.coll = c
	return t, ok
}

// handleLogged handles a request and records it (access log, metrics,
// trace); a page streamed after the handler returns is recorded when its
// body closes.
func (s *Server) handleLogged(ctx *fasthttp.RequestCtx) {
	if s.metricsHTTP != nil && string(ctx.Path()) == s.opts.MetricsPath {
		s.metricsHTTP(ctx)
		return
	}
	if s.access == nil && s.metrics == nil && s.tracer == nil {
		s.handle(ctx, &accessRecord{})
		return
	}
	var rec accessRecord
	if s.access != nil {
		rec = newAccessRecord(ctx)
	} else {
		rec.start = time.Now()
	}
	if s.tracer != nil {
		rec.method = string(ctx.Method())
		rec.span = s.startRequestSpan(ctx)
	}
	s.metrics.begin()
	s.handle(ctx, &rec)
	if _, streamed := ctx.Response.BodyStream().(*pageBody); streamed {
		return
	}
	s.finish(&rec, ctx.Response.StatusCode(), int64(len(ctx.Response.Body())), time.Now())
}

// finish records a request that has ended: its access-log line, its
// metrics and its span.
func (s *Server) finish(rec *accessRecord, status int, bytes int64, end time.Time) {
	s.access.write(rec, status, bytes)
	if s.metrics != nil {
		s.metrics.request(rec, status, bytes, end)
		s.metrics.end()
	}
	finishRequestSpan(rec, status, bytes)
}

func (s *Server) handle(ctx *fasthttp.RequestCtx, rec *accessRecord) {
	ctx.Response.Header.Set("OData-Version", "4.0")
	t, ok := s.route(ctx.Path())
	rec.coll = t.label()
	origin, browser := s.cors(ctx)
	if why := s.notReady.Load(); why != nil {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(unavailableRetry))
		s.fail(ctx, fasthttp.StatusServiceUnavailable, *why)
		return
	}
	if !ok {
		s.fail(ctx, fasthttp.StatusNotFound, "no such resource; collections are "+s.opts.Root+"/Metadata, /Locations, /Observations and /Records")
		return
	}
	switch {
	case ctx.IsGet() || ctx.IsHead():
	case ctx.IsOptions():
		s.options(ctx, origin, browser)
		return
	default:
		ctx.Response.Header.Set("Allow", "GET, HEAD, OPTIONS")
		s.fail(ctx, fasthttp.StatusMethodNotAllowed, "method "+string(ctx.Method())+" is not allowed; the API is read-only (GET)")
		return
	}

	params, err := query.Decode(ctx.URI().QueryString())
	if err != nil {
		s.write(ctx, fasthttp.StatusBadRequest, bodyNullMsg)
		return
	}

	caller, originName, ok := s.authenticate(ctx, origin, browser, rec)
	if !ok {
		return
	}
	rec.caller = caller
	g := &grant{s: s}
	streaming := false
	defer func() {
		if !streaming {
			g.release()
		}
	}()
	if !s.pace(ctx, caller, g, rec) {
		return
	}
	// The origin's slot is taken after the turn: a request waiting for its
	// turn must not keep other addresses of its origin out.
	if originName != "" {
		if !s.originSlots.acquire(originName) {
			s.metrics.refuse(refusedOrigin)
			s.tooMany(ctx, time.Second, "the browser origin has as many requests in flight as it may; retry in a second")
			return
		}
		g.origin = originName
	}

	streaming = s.answer(ctx, t, params, g, rec)
}

// unavailableRetry is the Retry-After, in seconds, while the server is
// unavailable.
const unavailableRetry = 5

// SetUnavailable makes every request answered 503 with Retry-After and the
// message why, from now on until it is called with "". The port can so be
// open (and say what is going on) before the store is ready.
func (s *Server) SetUnavailable(why string) {
	if why == "" {
		s.notReady.Store(nil)
		return
	}
	s.notReady.Store(&why)
}

// answer serves a request that holds its turn: the documents, an entity,
// or a query of a collection. It returns true when a body stream was
// started, which then owns g.
func (s *Server) answer(ctx *fasthttp.RequestCtx, t target, params []query.Param, g *grant, rec *accessRecord) bool {
	switch t.kind {
	case targetRoot:
		s.serviceDocument(ctx)
		return false
	case targetMetadata:
		s.metadata(ctx, params)
		return false
	case targetEntity:
		if s.entity(ctx, t, params) {
			rec.rows = 1
		}
		return false
	}
	q, err := query.Parse(t.coll, params)
	if err != nil {
		s.badQuery(ctx, err)
		return false
	}
	if !s.withinBudget(ctx, q, rec) || !s.takeSlot(ctx, g) {
		return false
	}
	rec.dbWork = true
	if t.kind == targetCount {
		s.countOnly(ctx, q, rec)
		return false
	}
	return s.serve(ctx, q, g, rec)
}

// withinBudget refuses (400) a $filter that costs more than FilterBudget,
// before any SQL runs.
func (s *Server) withinBudget(ctx *fasthttp.RequestCtx, q *query.Query, rec *accessRecord) bool {
	if s.opts.FilterBudget <= 0 && s.metrics == nil && s.tracer == nil {
		return true
	}
	cost, why := sqlstore.Cost(q)
	rec.cost = cost
	s.metrics.queryCost(q.Collection.Name, cost)
	if s.opts.FilterBudget <= 0 || cost <= s.opts.FilterBudget {
		return true
	}
	s.fail(ctx, fasthttp.StatusBadRequest, fmt.Sprintf(
		"the $filter costs %d units, over the budget of %d per request: %s. Use fewer alternatives, put an eq, in, lt or gt on a filterable field beside endswith, startswith, contains and ne, or split the request into several",
		cost, s.opts.FilterBudget, why))
	return false
}

// takeSlot takes a data query slot for g, waiting up to SlotWait; 503
// when none comes.
func (s *Server) takeSlot(ctx *fasthttp.RequestCtx, g *grant) bool {
	if s.slots == nil {
		return true
	}
	g.conn, _ = ctx.Conn().(*stallConn)
	if !s.slots.acquire(g, time.Now().Add(s.opts.SlotWait), s.turns.closing) {
		s.metrics.refuse(refusedSlotsBusy)
		ctx.Response.Header.Set("Retry-After", "1")
		s.fail(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf(
			"the server is running as many data queries as it allows (%d); retry in a second", s.slots.size))
		return false
	}
	g.query = true
	return true
}

// badQuery answers an error of query.Parse: 400 naming what is wrong.
func (s *Server) badQuery(ctx *fasthttp.RequestCtx, err error) {
	var qe *query.Error
	if errors.As(err, &qe) {
		s.fail(ctx, fasthttp.StatusBadRequest, qe.Detail)
		return
	}
	s.internal(ctx, err)
}

// grant is what a request holds while it runs: its caller's turn (with
// Sequential), its origin's slot, a data query token. The response body
// releases it when it streams; otherwise the handler does.
type grant struct {
	s      *Server
	turn   string
	origin string
	query  bool
	// conn is the response's connection, watched while the grant holds a
	// data slot; preempted is under the slots' lock.
	conn      *stallConn
	preempted bool
	// wasCut is set, before its connection is closed, on a grant that gave
	// its slot up, so its body can tell why it ended.
	wasCut atomic.Bool
}

// writingSince is when the response's current write began waiting on the
// client, in Unix nanoseconds (0: not writing).
func (g *grant) writingSince() int64 {
	if g.conn == nil {
		return 0
	}
	return g.conn.clock.since.Load()
}

// cut gives the slot up: closing the connection fails the blocked write,
// which ends the page and releases the grant.
func (g *grant) cut() {
	g.wasCut.Store(true)
	g.s.log.Info("odata: a response that its client does not read gave its data slot to a waiting request",
		"remote", g.conn.RemoteAddr().String())
	_ = g.conn.Conn.Close()
}

func (g *grant) release() {
	if g.turn != "" {
		g.s.turns.release(g.turn)
		g.turn = ""
	}
	if g.origin != "" {
		g.s.originSlots.release(g.origin)
		g.origin = ""
	}
	if g.query {
		g.s.slots.release(g)
		g.query = false
	}
}
