package odata

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/sqlstore"
)

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
	s.log.Error("odata: request failed", "uri", loggedURI(ctx), "err", err)
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
	s.log.Warn("odata: the database is unavailable", "uri", loggedURI(ctx), "err", err)
	ctx.Response.Header.Set("Retry-After", "5")
	s.fail(ctx, fasthttp.StatusServiceUnavailable, "the database is unavailable; retry in a few seconds")
}
