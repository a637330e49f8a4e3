package odata

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/sqlstore"
)

// cors reads the request's Origin and, when it is an allowed browser
// origin, sets the headers that let the page read the response.
func (s *Server) cors(ctx *fasthttp.RequestCtx) (origin string, browser bool) {
	origin = string(ctx.Request.Header.Peek("Origin"))
	browser = origin != "" && s.origins[strings.ToLower(origin)]
	if browser {
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "Link, Retry-After, OData-Version")
		h.Add("Vary", "Origin")
	}
	return origin, browser
}

// authenticate identifies the caller by API key, or by an allowed browser
// origin and the client's address when no key is sent (originName is then
// the origin, for its in-flight cap). It answers 401/403/429/503 itself.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, origin string, browser bool, rec *accessRecord) (caller, originName string, ok bool) {
	key := ctx.Request.Header.Peek("X-Api-Key")
	addr := s.clientAddr(ctx)
	if len(key) == 0 {
		if browser {
			// Per origin and address: anyone can send any Origin header,
			// so one slow reader with it must not lock out every browser
			// user of that origin.
			o := strings.ToLower(origin)
			caller := "origin:" + o + "@" + addr
			if !s.browsers.admit(caller, time.Now()) {
				caller = "origin:" + o + "@" + overflowAddr
			}
			return caller, o, true
		}
		s.metrics.keyFailed("missing")
		s.write(ctx, fasthttp.StatusUnauthorized, bodyUnauth)
		return "", "", false
	}
	if id, hit := s.keyCache.get(string(key)); hit {
		return "key:" + id, "", true
	}
	wait, fails := s.keyFails.check(addr)
	if fails == failBlocked {
		s.metrics.refuse(refusedKeyThrottled)
		s.tooMany(ctx, wait, "too many failed key checks from this network; retry after the time in Retry-After")
		return "", "", false
	}
	reqCtx, cancel := context.WithTimeout(s.base, controlTimeout)
	defer cancel()
	reqCtx, span := s.child(reqCtx, rec.span, "odata.check_key")
	id, ok, err := s.keys.CheckKey(reqCtx, string(key))
	endSpan(span, err)
	if err != nil {
		if sqlstore.Unavailable(err) {
			s.unavailable(ctx, fmt.Errorf("check key: %w", err))
			return "", "", false
		}
		s.internal(ctx, fmt.Errorf("check key: %w", err))
		return "", "", false
	}
	if !ok {
		s.metrics.keyFailed("unknown")
		s.keyFails.failed(addr)
		if fails == failOverflow {
			// Failures from everywhere are over the limit: a failed key
			// is refused as throttled; a valid one has just passed.
			s.metrics.refuse(refusedKeyThrottled)
			s.tooMany(ctx, wait, "too many failed key checks; retry after the time in Retry-After")
			return "", "", false
		}
		s.write(ctx, fasthttp.StatusForbidden, bodyForbidden)
		return "", "", false
	}
	s.keyCache.put(string(key), id)
	return "key:" + id, "", true
}

// tooMany answers 429 with Retry-After in whole seconds (at least one) and
// a body that keeps the message DataStream clients know and adds the
// errors member that makes the shell client stop instead of reading an
// empty last page.
func (s *Server) tooMany(ctx *fasthttp.RequestCtx, retry time.Duration, detail string) {
	secs := max(int64(math.Ceil(retry.Seconds())), 1)
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	b := append([]byte(`{"message":"Too Many Requests","errors":[{"status":429,"title":"Too Many Requests","detail":`), nil...)
	b = appendJSONString(b, detail)
	s.write(ctx, fasthttp.StatusTooManyRequests, append(b, "}]}"...))
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
