package odata

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

// serve answers a valid query. It returns true when a body stream was
// started, which then owns the caller's turn and slot.
func (s *Server) serve(ctx *fasthttp.RequestCtx, q *query.Query, g *grant, rec *accessRecord) bool {
	budget, cancelBudget := context.WithTimeout(s.base, s.opts.QueryTimeout)
	defer cancelBudget()
	csv := wantsCSV(ctx, q)
	count, answered := s.count(ctx, budget, q, csv, rec)
	if answered {
		return false
	}
	page, link, head, ok := s.decidePage(ctx, budget, q, csv, count, rec)
	if !ok {
		return false
	}
	s.pageHeaders(ctx, csv, link, rec)
	if ctx.IsHead() {
		return false
	}

	// The rows span lasts as long as the body: the cursor is read at the
	// client's pace.
	_, rowsSpan := s.child(budget, rec.span, "odata.rows")
	cur, streamCtx, cancelStream, err := s.openRows(trace.ContextWithSpan(budget, rowsSpan), q, page)
	if err != nil {
		endSpan(rowsSpan, err)
		ctx.Response.Header.Del("Link")
		s.dbFailed(ctx, budget, err)
		return false
	}

	enc := s.encoding(ctx)
	if enc != "" {
		ctx.Response.Header.Set("Content-Encoding", enc)
	}
	rec.coding = enc
	// A body past StreamTimeout is cut by closing its connection: its
	// writer may be blocked on a client that reads nothing, holding the
	// cursor (and its database connection) until the write fails.
	conn := ctx.Conn()
	stopCut := context.AfterFunc(streamCtx, func() { conn.Close() })
	body := &pageBody{s: s, q: q, cur: cur, head: head, csv: csv, link: link, enc: enc, cancel: cancelStream, stopCut: stopCut, grant: g, rec: *rec,
		streamCtx: streamCtx, span: rowsSpan}
	s.streams.Add(1)
	ctx.Response.SetBodyStream(body, -1)
	return true
}

// count runs $count=true. DataStream's clients get the count alone
// (answered is true then); any other client gets the "@odata.count":n,
// member that goes before its rows.
func (s *Server) count(ctx *fasthttp.RequestCtx, budget context.Context, q *query.Query, csv bool, rec *accessRecord) (member []byte, answered bool) {
	if !q.Count {
		return nil, false
	}
	sctx, span := s.child(budget, rec.span, "odata.count")
	n, err := s.store.Count(sctx, q)
	endSpan(span, err)
	if err != nil {
		s.dbFailed(ctx, budget, err)
		return nil, true
	}
	if csv || dataStreamCount(ctx, q) {
		// DataStream's form: the count as a string, no rows (the Python
		// client crashes on anything else).
		b := append([]byte(`{"value":"`), strconv.FormatInt(n, 10)...)
		s.write(ctx, fasthttp.StatusOK, append(b, `"}`...))
		return nil, true
	}
	member = strconv.AppendInt([]byte(`"@odata.count":`), n, 10)
	return append(member, ','), false
}

// decidePage probes the page (its rows, whether more follow) and applies
// the size cap; it answers the request itself when ok is false.
func (s *Server) decidePage(ctx *fasthttp.RequestCtx, budget context.Context, q *query.Query, csv bool, count []byte, rec *accessRecord) (page query.Page, link, head []byte, ok bool) {
	sctx, span := s.child(budget, rec.span, "odata.probe")
	page, err := s.store.Probe(sctx, q)
	if err == nil {
		span.SetAttributes(attribute.Int("odata.rows", page.Rows), attribute.Bool("odata.more", page.More))
	}
	endSpan(span, err)
	if err != nil {
		s.dbFailed(ctx, budget, err)
		return page, nil, nil, false
	}
	if page.More {
		link = s.nextLink(ctx, q, page.Last)
	}
	head = s.pageHead(ctx, q, metadataLevel(ctx), csv, count)
	sctx, span = s.child(budget, rec.span, "odata.page_size")
	tooBig, err := s.overCap(sctx, q, page, len(head), len(link))
	endSpan(span, err)
	if err != nil {
		s.dbFailed(ctx, budget, err)
		return page, nil, nil, false
	}
	if tooBig {
		s.fail(ctx, fasthttp.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the page of %d rows would exceed %d bytes; lower $top or $select fewer fields", page.Rows, s.opts.MaxPageBytes))
		return page, nil, nil, false
	}
	return page, link, head, true
}

// pageHeaders sets the status and headers of a page.
func (s *Server) pageHeaders(ctx *fasthttp.RequestCtx, csv bool, link []byte, rec *accessRecord) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	rec.csv = csv
	if csv {
		ctx.SetContentType(csvType)
	} else {
		ctx.SetContentType(jsonType)
	}
	// The format follows Accept and the coding Accept-Encoding, also for
	// HEAD, so caches keep the variants apart.
	ctx.Response.Header.Add("Vary", "Accept, Accept-Encoding")
	if link != nil {
		ctx.Response.Header.Set("Link", "<"+string(link)+`>; rel="next"`)
	}
}

// pageHead is what precedes the rows: the CSV header line, or the JSON
// object up to "value":[ with the context URL and count an OData client
// gets.
func (s *Server) pageHead(ctx *fasthttp.RequestCtx, q *query.Query, level metaLevel, csv bool, count []byte) []byte {
	if csv {
		return appendCSVHeader(nil, q)
	}
	head := []byte{'{'}
	if level == metadataMinimal {
		head = append(head, `"@odata.context":`...)
		head = appendJSONString(head, string(s.contextURL(ctx, q, "")))
		head = append(head, ',')
	}
	head = append(head, count...)
	return append(head, `"value":[`...)
}

// openRows opens the cursor of a page. The cursor lives as long as the
// body, under StreamTimeout; the budget only bounds getting its first row.
// On error nothing is left open.
func (s *Server) openRows(budget context.Context, q *query.Query, page query.Page) (_ query.Cursor, streamCtx context.Context, cancel context.CancelFunc, err error) {
	streamCtx, cancel = context.WithTimeout(s.base, s.opts.StreamTimeout)
	var cur query.Cursor
	defer func() {
		if err != nil {
			if cur != nil {
				cur.Close()
			}
			cancel()
		}
	}()
	deadline, _ := budget.Deadline()
	timer := time.AfterFunc(time.Until(deadline), cancel)
	rowsCtx := streamCtx
	if s.tracer != nil {
		rowsCtx = trace.ContextWithSpan(streamCtx, trace.SpanFromContext(budget))
	}
	cur, err = s.store.Rows(rowsCtx, q, page)
	if inTime := timer.Stop(); err == nil && !inTime {
		err = context.DeadlineExceeded
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return cur, streamCtx, cancel, nil
}

// overCap decides 413: first from the stored size bounds, and only when
// those exceed the cap, from the page's actual rows.
func (s *Server) overCap(ctx context.Context, q *query.Query, p query.Page, headLen, linkLen int) (bool, error) {
	fixed := jsonenc.PageOverhead(headLen, linkLen) + int64(p.Rows)*jsonenc.RowOverhead(q)
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

func (s *Server) nextLink(ctx *fasthttp.RequestCtx, q *query.Query, last query.Key) []byte {
	b := s.appendServiceRoot(nil, ctx)
	b = append(b, '/')
	b = append(b, q.Collection.Name...)
	b = append(b, '?')
	return q.AppendNextQuery(b, last)
}

// appendServiceRoot appends the absolute URL of Root: from PublicURL, or
// else the scheme and host a trusted proxy forwarded, or the request's
// scheme (https when it came over TLS) and linkHost.
func (s *Server) appendServiceRoot(b []byte, ctx *fasthttp.RequestCtx) []byte {
	if s.opts.PublicURL != "" {
		b = append(b, strings.TrimSuffix(s.opts.PublicURL, "/")...)
		return append(b, s.opts.Root...)
	}
	scheme, host := s.forwardedView(ctx)
	if scheme == "" {
		scheme = "http"
		if ctx.IsTLS() {
			scheme = "https"
		}
	}
	b = append(b, scheme...)
	b = append(b, "://"...)
	if host == "" {
		host = linkHost(ctx)
	}
	b = append(b, host...)
	return append(b, s.opts.Root...)
}

// linkHost is the host[:port] of links made without PublicURL or a
// forwarded host: the request's Host when it names the address the
// connection reached (or "localhost" on a loopback connection), else that
// address itself. Anyone can send any Host, and the links one client is
// given are seen by others (a cache in front keeps them), so a Host that
// is not this server's own does not write them; deployments known by a
// name set -public-url.
func linkHost(ctx *fasthttp.RequestCtx) string {
	local, ok := ctx.LocalAddr().(*net.TCPAddr)
	if !ok {
		return string(ctx.Host())
	}
	la, _ := netip.AddrFromSlice(local.IP)
	la = la.Unmap()
	self := netip.AddrPortFrom(la, uint16(local.Port)).String()
	h := string(ctx.Host())
	name, port, err := net.SplitHostPort(h)
	if err != nil {
		name, port = strings.Trim(h, "[]"), ""
	}
	if port != strconv.Itoa(local.Port) && (port != "" || local.Port != 80 && local.Port != 443) {
		return self
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Unmap() == la {
		return h
	}
	if strings.EqualFold(name, "localhost") && la.IsLoopback() {
		return h
	}
	return self
}

// encoding picks the response coding from Accept-Encoding.
func (s *Server) encoding(ctx *fasthttp.RequestCtx) string {
	return s.opts.negotiate(string(ctx.Request.Header.Peek("Accept-Encoding")))
}

// dataStreamCount reports whether $count=true is answered in DataStream's
// form, {"value":"N"} and no rows, rather than OData's @odata.count beside
// the rows. Both answer the same URL, so only the headers can tell the
// clients apart: the four DataStream clients send
// "Accept: application/vnd.api+json" and the API's documented curl
// examples send */* and nothing else; generic OData clients send
// application/json, or announce OData with OData-Version, OData-MaxVersion
// or $format, or are fetch-based libraries (o.js) that send */* with a
// Content-Type on a GET, which no DataStream client does.
func dataStreamCount(ctx *fasthttp.RequestCtx, q *query.Query) bool {
	h := &ctx.Request.Header
	if q.Format != "" || len(h.Peek("OData-Version")) > 0 || len(h.Peek("OData-MaxVersion")) > 0 {
		return false
	}
	accept := strings.ToLower(string(h.Peek("Accept")))
	if strings.Contains(accept, "application/vnd.api+json") {
		return true
	}
	return strings.Contains(accept, "*/*") && len(h.ContentType()) == 0
}
