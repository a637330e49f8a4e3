package odata

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// Server serves the API. Create it with NewServer, run it with Serve, stop
// it with Shutdown.
type Server struct {
	opts    Options
	store   Store
	keys    KeyStore
	limiter RateLimiter
	log     *slog.Logger
	origins map[string]bool
	leases  *leases
	access  *accessLog // nil without Options.AccessLog
	http    *fasthttp.Server
	// csdlXML and csdlJSON are the $metadata documents, built once.
	csdlXML, csdlJSON []byte

	keyCache    *keyCache
	keyFails    *failThrottle
	originSlots *slots
	// queries holds a token per request doing database work; nil: no cap.
	queries     chan struct{}
	limiterDown atomic.Bool // the limiter's last answer was an error

	// base is canceled by a forced shutdown: it ends database work still
	// running for responses that did not finish in time.
	base   context.Context
	cancel context.CancelFunc

	streams sync.WaitGroup // response bodies being written
	connsMu sync.Mutex
	conns   map[*stallConn]struct{}
	closed  bool
}

// NewServer checks opts and builds a server over store. keys checks API
// keys; limiter applies the per-second rule (nil: none, only the
// sequential rule of Options applies).
func NewServer(opts Options, store Store, keys KeyStore, limiter RateLimiter) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if store == nil || keys == nil {
		return nil, errors.New("odata: a store and a key store are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, store: store, keys: keys, limiter: limiter, log: log,
		origins: map[string]bool{}, leases: newLeases(), conns: map[*stallConn]struct{}{},
		csdlXML: metadataXML(), csdlJSON: metadataJSON(),
		access:      newAccessLog(opts.AccessLog, opts.AccessLogPerSecond, nil),
		keyCache:    newKeyCache(opts.KeyCacheTTL, time.Now),
		keyFails:    newFailThrottle(opts.KeyFailures, opts.KeyFailureWindow, time.Now),
		originSlots: newSlots(opts.OriginMaxInFlight)}
	if n := queryCap(opts.MaxQueries, store); n > 0 {
		s.queries = make(chan struct{}, n)
	}
	for _, o := range opts.CORSOrigins {
		s.origins[strings.ToLower(o)] = true
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.http = &fasthttp.Server{
		Handler:                      s.handleLogged,
		Name:                         "sluice",
		ReadTimeout:                  30 * time.Second,
		IdleTimeout:                  90 * time.Second,
		ReadBufferSize:               64 << 10, // long $filter values arrive in the request line
		MaxRequestBodySize:           4 << 10,  // only GET/HEAD/OPTIONS are served
		NoDefaultContentType:         true,
		NoDefaultDate:                false,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
	}
	return s, nil
}

// queryCap is the effective MaxQueries: derived from the store's pool when
// 0, none when negative.
func queryCap(configured int, store Store) int {
	if configured != 0 {
		return configured
	}
	if p, ok := store.(interface{ MaxConns() int }); ok {
		return max(1, p.MaxConns()-KeyConns)
	}
	return -1
}

// MaxQueries is the cap on concurrent data queries in effect (negative:
// none).
func (s *Server) MaxQueries() int {
	if s.queries == nil {
		return -1
	}
	return cap(s.queries)
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(&stallListener{Listener: ln, s: s})
	if err != nil && s.isClosed() {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for responses in progress
// to finish. When ctx ends first, their database work is canceled and their
// connections are closed; Shutdown returns once every response has ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.connsMu.Lock()
	s.closed = true
	s.connsMu.Unlock()
	err := s.http.ShutdownWithContext(ctx)
	if err != nil {
		s.cancel()
		s.connsMu.Lock()
		for c := range s.conns {
			c.Conn.Close()
		}
		s.connsMu.Unlock()
	}
	s.streams.Wait()
	s.cancel()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("odata: shutdown cut responses short: %w", err)
	}
	return err
}

func (s *Server) isClosed() bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return s.closed
}

// stallListener wraps accepted connections so that a write that makes no
// progress for StallTimeout fails, and so Shutdown can close them.
type stallListener struct {
	net.Listener
	s *Server
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &stallConn{Conn: c, s: l.s}
	l.s.connsMu.Lock()
	l.s.conns[sc] = struct{}{}
	l.s.connsMu.Unlock()
	return sc, nil
}

type stallConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *stallConn) Write(p []byte) (int, error) {
	// fasthttp sets no write deadline of its own (WriteTimeout is 0): the
	// deadline here restarts with every write, so it bounds a stall, not
	// the length of a response.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.s.opts.StallTimeout))
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	c.once.Do(func() {
		c.s.connsMu.Lock()
		delete(c.s.conns, c)
		c.s.connsMu.Unlock()
	})
	return c.Conn.Close()
}

// --- request handling ----------------------------------------------------------

// controlTimeout bounds the key check and the rate limit decision, which
// are not part of the query's budget.
const controlTimeout = 10 * time.Second

var (
	jsonType      = "application/json; charset=utf-8"
	csvType       = "text/csv; charset=utf-8; header=present"
	bodyNullMsg   = []byte(`{"message":null}`)
	bodyUnauth    = []byte(`{"message":"Unauthorized"}`)
	bodyForbidden = []byte(`{"message":"Forbidden"}`)
	bodyTooMany   = []byte(`{"message":"Too Many Requests"}`)
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

// handleLogged handles a request and writes its access-log line; a page
// streamed after the handler returns is logged when its body closes.
func (s *Server) handleLogged(ctx *fasthttp.RequestCtx) {
	if s.access == nil {
		s.handle(ctx, &accessRecord{})
		return
	}
	rec := newAccessRecord(ctx)
	s.handle(ctx, &rec)
	if _, streamed := ctx.Response.BodyStream().(*pageBody); streamed {
		return
	}
	s.access.write(&rec, ctx.Response.StatusCode(), int64(len(ctx.Response.Body())))
}

func (s *Server) handle(ctx *fasthttp.RequestCtx, rec *accessRecord) {
	ctx.Response.Header.Set("OData-Version", "4.0")
	t, ok := s.route(ctx.Path())
	origin := string(ctx.Request.Header.Peek("Origin"))
	browser := origin != "" && s.origins[strings.ToLower(origin)]
	if browser {
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "Link, Retry-After, OData-Version")
		h.Add("Vary", "Origin")
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

	caller, originName, ok := s.authenticate(ctx, origin, browser)
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
	if originName != "" {
		if !s.originSlots.acquire(originName) {
			s.tooMany(ctx, time.Second)
			return
		}
		g.origin = originName
	}
	if s.opts.Sequential {
		if !s.leases.acquire(caller) {
			s.tooMany(ctx, time.Second)
			return
		}
		g.lease = caller
	}
	if !s.allow(ctx, caller) {
		return
	}

	switch t.kind {
	case targetRoot:
		s.serviceDocument(ctx)
		return
	case targetMetadata:
		s.metadata(ctx, params)
		return
	case targetEntity:
		if s.entity(ctx, t, params) {
			rec.rows = 1
		}
		return
	}
	q, err := query.Parse(t.coll, params)
	if err != nil {
		s.badQuery(ctx, err)
		return
	}
	if s.opts.FilterBudget > 0 {
		if cost, why := sqlstore.Cost(q); cost > s.opts.FilterBudget {
			s.fail(ctx, fasthttp.StatusBadRequest, fmt.Sprintf(
				"the $filter costs %d units, over the budget of %d per request: %s. Use fewer alternatives, put an eq, in, lt or gt on a filterable field beside endswith, startswith, contains and ne, or split the request into several",
				cost, s.opts.FilterBudget, why))
			return
		}
	}
	if s.queries != nil {
		select {
		case s.queries <- struct{}{}:
			g.query = true
		default:
			ctx.Response.Header.Set("Retry-After", "1")
			s.fail(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf(
				"the server is running as many data queries as it allows (%d); retry in a second", cap(s.queries)))
			return
		}
	}
	if t.kind == targetCount {
		s.countOnly(ctx, q)
		return
	}
	streaming = s.serve(ctx, q, g, rec)
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

// grant is what a request holds while it runs: its caller's lease, its
// origin's slot, a data query token. The response body releases it when
// it streams; otherwise the handler does.
type grant struct {
	s      *Server
	lease  string
	origin string
	query  bool
}

func (g *grant) release() {
	if g.lease != "" {
		g.s.leases.release(g.lease)
		g.lease = ""
	}
	if g.origin != "" {
		g.s.originSlots.release(g.origin)
		g.origin = ""
	}
	if g.query {
		<-g.s.queries
		g.query = false
	}
}

// authenticate identifies the caller by API key, or by an allowed browser
// origin and the client's address when no key is sent (originName is then
// the origin, for its in-flight cap). It answers 401/403/429/503 itself.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, origin string, browser bool) (caller, originName string, ok bool) {
	key := ctx.Request.Header.Peek("X-Api-Key")
	addr := ctx.RemoteIP().String()
	if len(key) == 0 {
		if browser {
			// Per origin and address: anyone can send any Origin header,
			// so one slow reader with it must not lock out every browser
			// user of that origin.
			o := strings.ToLower(origin)
			return "origin:" + o + "@" + addr, o, true
		}
		s.write(ctx, fasthttp.StatusUnauthorized, bodyUnauth)
		return "", "", false
	}
	if id, hit := s.keyCache.get(string(key)); hit {
		return "key:" + id, "", true
	}
	if wait, blocked := s.keyFails.blocked(addr); blocked {
		s.tooMany(ctx, wait)
		return "", "", false
	}
	reqCtx, cancel := context.WithTimeout(s.base, controlTimeout)
	defer cancel()
	id, ok, err := s.keys.CheckKey(reqCtx, string(key))
	if err != nil {
		if sqlstore.Unavailable(err) {
			s.unavailable(ctx, fmt.Errorf("check key: %w", err))
			return "", "", false
		}
		s.internal(ctx, fmt.Errorf("check key: %w", err))
		return "", "", false
	}
	if !ok {
		s.keyFails.failed(addr)
		s.write(ctx, fasthttp.StatusForbidden, bodyForbidden)
		return "", "", false
	}
	s.keyCache.put(string(key), id)
	return "key:" + id, "", true
}

// allow applies the rate limiter; it answers 429 or 503 itself.
func (s *Server) allow(ctx *fasthttp.RequestCtx, caller string) bool {
	if s.limiter == nil {
		return true
	}
	reqCtx, cancel := context.WithTimeout(s.base, controlTimeout)
	defer cancel()
	ok, retry, err := s.limiter.Allow(reqCtx, caller)
	if err != nil {
		// Once per outage, not once per request.
		if s.limiterDown.CompareAndSwap(false, true) {
			s.log.Warn("odata: rate limiter failed; until it answers again requests are "+map[bool]string{true: "served without its limit (fail open)", false: "refused with 503"}[s.opts.FailOpen],
				"err", err)
		}
		if s.opts.FailOpen {
			return true
		}
		ctx.Response.Header.Set("Retry-After", "1")
		s.fail(ctx, fasthttp.StatusServiceUnavailable, "rate limiting is unavailable; retry later")
		return false
	}
	if s.limiterDown.CompareAndSwap(true, false) {
		s.log.Info("odata: rate limiter answers again")
	}
	if !ok {
		s.tooMany(ctx, retry)
		return false
	}
	return true
}

func (s *Server) tooMany(ctx *fasthttp.RequestCtx, retry time.Duration) {
	secs := int64(math.Ceil(retry.Seconds()))
	if secs < 1 {
		secs = 1
	}
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	s.write(ctx, fasthttp.StatusTooManyRequests, bodyTooMany)
}

func (s *Server) options(ctx *fasthttp.RequestCtx, origin string, browser bool) {
	ctx.Response.Header.Set("Allow", "GET, HEAD, OPTIONS")
	if origin == "" {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if !browser {
		s.write(ctx, fasthttp.StatusForbidden, bodyForbidden)
		return
	}
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
	if req := ctx.Request.Header.Peek("Access-Control-Request-Headers"); len(req) > 0 {
		h.SetBytesV("Access-Control-Allow-Headers", req)
		h.Add("Vary", "Access-Control-Request-Headers")
	}
	h.Set("Access-Control-Max-Age", "600")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (s *Server) serviceDocument(ctx *fasthttp.RequestCtx) {
	b := []byte(`{`)
	if metadataLevel(ctx) != metadataNone {
		b = append(b, `"@odata.context":`...)
		b = appendJSONString(b, string(s.appendServiceRoot(nil, ctx))+"/$metadata")
		b = append(b, ',')
	}
	b = append(b, `"value":[`...)
	for i, name := range []string{"Metadata", "Locations", "Observations", "Records"} {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":"`+name+`","kind":"EntitySet","url":"`+name+`"}`...)
	}
	s.write(ctx, fasthttp.StatusOK, append(b, "]}"...))
}

func (s *Server) write(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(jsonType)
	ctx.SetBody(body)
}

var statusTitles = map[int]string{
	400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
	500: "Internal Server Error", 503: "Service Unavailable", 504: "Gateway Timeout",
}

// fail answers with the errors member the official shell client checks.
func (s *Server) fail(ctx *fasthttp.RequestCtx, status int, detail string) {
	b := []byte(`{"errors":[{"status":`)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"title":`...)
	b = strconv.AppendQuote(b, statusTitles[status])
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, detail)
	b = append(b, "}]}"...)
	s.write(ctx, status, b)
}

func (s *Server) internal(ctx *fasthttp.RequestCtx, err error) {
	s.log.Error("odata: request failed", "uri", string(ctx.RequestURI()), "err", err)
	s.fail(ctx, fasthttp.StatusInternalServerError, "internal error")
}

// dbFailed answers a failed database call: 504 when the budget (or the
// statement timeout) ran out, 503 when the database cannot be reached.
func (s *Server) dbFailed(ctx *fasthttp.RequestCtx, budget context.Context, err error) {
	if errors.Is(budget.Err(), context.DeadlineExceeded) || sqlstore.TimedOut(err) {
		s.fail(ctx, fasthttp.StatusGatewayTimeout, fmt.Sprintf("the query did not finish within %s; retry once, then lower $top or narrow $filter", s.opts.QueryTimeout))
		return
	}
	if sqlstore.Unavailable(err) {
		s.unavailable(ctx, err)
		return
	}
	s.internal(ctx, err)
}

// unavailable answers 503 for a database that cannot be reached now.
func (s *Server) unavailable(ctx *fasthttp.RequestCtx, err error) {
	s.log.Warn("odata: the database is unavailable", "uri", string(ctx.RequestURI()), "err", err)
	ctx.Response.Header.Set("Retry-After", "5")
	s.fail(ctx, fasthttp.StatusServiceUnavailable, "the database is unavailable; retry in a few seconds")
}

// serve answers a valid query. It returns true when a body stream was
// started, which then owns the caller's lease.
func (s *Server) serve(ctx *fasthttp.RequestCtx, q *query.Query, g *grant, rec *accessRecord) bool {
	budget, cancelBudget := context.WithTimeout(s.base, s.opts.QueryTimeout)
	defer cancelBudget()
	level := metadataLevel(ctx)
	csv := wantsCSV(ctx, q)
	var count []byte // an OData client's "@odata.count":n,
	if q.Count {
		n, err := s.store.Count(budget, q)
		if err != nil {
			s.dbFailed(ctx, budget, err)
			return false
		}
		if level != metadataMinimal || csv {
			// DataStream's form: the count as a string, no rows (the
			// Python client crashes on anything else).
			b := append([]byte(`{"value":"`), strconv.FormatInt(n, 10)...)
			s.write(ctx, fasthttp.StatusOK, append(b, `"}`...))
			return false
		}
		// A client that announced OData gets the standard inline count
		// beside the rows.
		count = strconv.AppendInt(append(count, `"@odata.count":`...), n, 10)
		count = append(count, ',')
	}
	page, err := s.store.Probe(budget, q)
	if err != nil {
		s.dbFailed(ctx, budget, err)
		return false
	}
	var link []byte
	if page.More {
		link = s.nextLink(ctx, q, page.Last)
	}
	var head []byte // what precedes the rows
	if csv {
		head = appendCSVHeader(nil, q)
	} else {
		head = append(head, '{')
		if level == metadataMinimal {
			head = append(head, `"@odata.context":`...)
			head = appendJSONString(head, string(s.contextURL(ctx, q, "")))
			head = append(head, ',')
		}
		head = append(head, count...)
		head = append(head, `"value":[`...)
	}
	if tooBig, err := s.overCap(budget, q, page, len(link)+len(head)); err != nil {
		s.dbFailed(ctx, budget, err)
		return false
	} else if tooBig {
		s.fail(ctx, fasthttp.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the page of %d rows would exceed %d bytes; lower $top or $select fewer fields", page.Rows, s.opts.MaxPageBytes))
		return false
	}

	ctx.SetStatusCode(fasthttp.StatusOK)
	if csv {
		ctx.SetContentType(csvType)
	} else {
		ctx.SetContentType(jsonType)
	}
	// The format follows Accept and the coding Accept-Encoding, also
	// for HEAD, so caches keep the variants apart.
	ctx.Response.Header.Add("Vary", "Accept, Accept-Encoding")
	if link != nil {
		ctx.Response.Header.Set("Link", "<"+string(link)+`>; rel="next"`)
	}
	if ctx.IsHead() {
		return false
	}

	// The cursor lives as long as the body; the budget only bounds getting
	// its first row.
	streamCtx, cancelStream := context.WithTimeout(s.base, s.opts.StreamTimeout)
	deadline, _ := budget.Deadline()
	timer := time.AfterFunc(time.Until(deadline), cancelStream)
	cur, err := s.store.Rows(streamCtx, q, page)
	inTime := timer.Stop()
	if err != nil || !inTime {
		cancelStream()
		if cur != nil {
			cur.Close()
		}
		if err == nil {
			err = context.DeadlineExceeded
		}
		ctx.Response.Header.Del("Link")
		s.dbFailed(ctx, budget, err)
		return false
	}

	enc := s.encoding(ctx)
	if enc != "" {
		ctx.Response.Header.Set("Content-Encoding", enc)
	}
	// A body past StreamTimeout is cut by closing its connection: its
	// writer may be blocked on a client that reads nothing, holding the
	// cursor (and its database connection) until the write fails.
	conn := ctx.Conn()
	stopCut := context.AfterFunc(streamCtx, func() { conn.Close() })
	body := &pageBody{s: s, q: q, cur: cur, head: head, csv: csv, link: link, enc: enc, cancel: cancelStream, stopCut: stopCut, grant: g, rec: *rec}
	s.streams.Add(1)
	ctx.Response.SetBodyStream(body, -1)
	return true
}

// pageBody is a page's response body. fasthttp calls WriteTo on the
// connection's goroutine, after the headers, and Close once the response is
// written or abandoned (also for HEAD, and when the client went away before
// any byte). Writes go straight to the connection as 32 KiB chunks, so a
// client that reads slowly blocks WriteTo, which stops reading the cursor.
type pageBody struct {
	s       *Server
	q       *query.Query
	cur     query.Cursor
	head    []byte // the body before the first row
	csv     bool   // rows as CSV lines; the link goes only in the Link header
	link    []byte
	enc     string
	grant   *grant // released when the body ends
	cancel  context.CancelFunc
	stopCut func() bool // disarms the StreamTimeout cut
	rec     accessRecord
	// rows and sent (body bytes after compression) are counted while
	// streaming, for the access log; atomic because the Read path streams
	// on its own goroutine.
	rows, sent atomic.Int64

	once sync.Once
	pr   *io.PipeReader // only when fasthttp reads instead of WriteTo
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace Read.
func (b *pageBody) SupportsBodyWriteTo() bool { return true }

func (b *pageBody) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := b.s.stream(cw, b.enc, b)
	b.sent.Store(cw.n)
	if err != nil {
		b.s.log.Info("odata: response cut short", "collection", b.q.Collection.Name, "err", err)
	}
	return cw.n, err
}

// Read serves a caller that reads the body instead of using WriteTo; the
// body is then written into a pipe by a goroutine that Close ends.
func (b *pageBody) Read(p []byte) (int, error) {
	if b.pr == nil {
		pr, pw := io.Pipe()
		b.pr = pr
		go func() {
			_, err := b.WriteTo(pw)
			pw.CloseWithError(err)
		}()
	}
	return b.pr.Read(p)
}

// Close releases the cursor, the stream's context and the caller's lease.
func (b *pageBody) Close() error {
	b.once.Do(func() {
		if b.pr != nil {
			b.pr.Close()
		}
		b.stopCut()
		b.cur.Close()
		b.cancel()
		b.grant.release()
		b.rec.rows = b.rows.Load()
		b.s.access.write(&b.rec, fasthttp.StatusOK, b.sent.Load())
		b.s.streams.Done()
	})
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// overCap decides 413: first from the stored size bounds, and only when
// those exceed the cap, from the page's actual rows.
func (s *Server) overCap(ctx context.Context, q *query.Query, p query.Page, linkLen int) (bool, error) {
	fixed := int64(len(`{"value":[],"@odata.nextLink":""}`)+linkLen) + int64(p.Rows)*rowOverhead(q)
	bound, err := s.store.ValueBytesBound(ctx, q, p.Rows)
	if err != nil {
		return false, err
	}
	if fixed+bound <= s.opts.MaxPageBytes {
		return false, nil
	}
	exact, err := s.store.ExactValueBytes(ctx, q, p)
	if err != nil {
		return false, err
	}
	return fixed+exact > s.opts.MaxPageBytes, nil
}

// rowOverhead is the bytes of one row besides its values: braces, commas,
// quoted field names and colons.
func rowOverhead(q *query.Query) int64 {
	n := int64(2 + 1) // {} and the comma between rows
	for _, fi := range q.Fields {
		n += int64(len(q.Collection.Fields[fi].Name)) + 4 // "name": and ,
	}
	return n
}

func (s *Server) nextLink(ctx *fasthttp.RequestCtx, q *query.Query, last query.Key) []byte {
	b := s.appendServiceRoot(nil, ctx)
	b = append(b, '/')
	b = append(b, q.Collection.Name...)
	b = append(b, '?')
	return q.AppendNextQuery(b, last)
}

// appendServiceRoot appends the absolute URL of Root: from PublicURL, or
// else the request's Host (https when the request came over TLS or
// X-Forwarded-Proto says so).
func (s *Server) appendServiceRoot(b []byte, ctx *fasthttp.RequestCtx) []byte {
	if s.opts.PublicURL != "" {
		b = append(b, strings.TrimSuffix(s.opts.PublicURL, "/")...)
	} else {
		scheme := "http://"
		if ctx.IsTLS() || strings.EqualFold(string(ctx.Request.Header.Peek("X-Forwarded-Proto")), "https") {
			scheme = "https://"
		}
		b = append(b, scheme...)
		b = append(b, ctx.Host()...)
	}
	return append(b, s.opts.Root...)
}

// encoding picks the response coding from Accept-Encoding.
func (s *Server) encoding(ctx *fasthttp.RequestCtx) string {
	return s.opts.negotiate(string(ctx.Request.Header.Peek("Accept-Encoding")))
}

// flushEvery is how much encoded JSON is collected before it is written:
// large enough for few writes, small enough to keep memory flat.
const flushEvery = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, flushEvery+4096); return &b }}

// stream writes the body: rows as the cursor yields them, then the link.
// Uncompressed JSON goes out in writes of about flushEvery bytes (one chunk
// each); compressed output is gathered to the same size first.
func (s *Server) stream(w io.Writer, enc string, b *pageBody) error {
	q, cur, link := b.q, b.cur, b.link
	out := w
	var zbuf *bufio.Writer
	var closer compressor
	if enc != codingIdentity {
		zbuf = bufio.NewWriterSize(w, flushEvery)
		closer = getCompressor(enc, zbuf)
		defer putCompressor(enc, closer)
		out = closer
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := append((*bp)[:0], b.head...)
	keys := fieldKeys(q)
	first := true
	for cur.Next() {
		b.rows.Add(1)
		switch {
		case b.csv:
			buf = appendCSVRow(buf, q, cur.Values())
		case first:
			buf = appendRow(buf, q, keys, cur.Values())
		default:
			buf = appendRow(append(buf, ','), q, keys, cur.Values())
		}
		first = false
		if len(buf) >= flushEvery {
			if _, err := out.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if err := cur.Err(); err != nil {
		// Headers are gone: end without the closing bracket, so every
		// client sees invalid JSON rather than a short page (and the
		// failed body makes fasthttp drop the connection before the
		// last chunk, which a CSV reader sees as a truncated body).
		_, _ = out.Write(buf)
		return fmt.Errorf("rows: %w", err)
	}
	if !b.csv {
		buf = append(buf, ']')
		if link != nil {
			buf = append(buf, `,"@odata.nextLink":`...)
			buf = appendJSONString(buf, string(link))
		}
		buf = append(buf, '}')
	}
	*bp = buf[:0]
	if _, err := out.Write(buf); err != nil {
		return err
	}
	if closer != nil {
		if err := closer.Close(); err != nil {
			return err
		}
		return zbuf.Flush()
	}
	return nil
}
