package odata

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// accessLog writes one line per request to its logger, at most Rate lines
// a second on average with bursts of Burst (a token bucket), so that a
// storm of refused requests cannot fill a disk. Lines over the budget are
// counted; the next line written carries that count as "suppressed".
type accessLog struct {
	log   *slog.Logger
	rate  float64
	burst float64
	now   func() time.Time

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int64
}

func newAccessLog(log *slog.Logger, perSecond int, now func() time.Time) *accessLog {
	if log == nil {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	r := float64(perSecond)
	return &accessLog{log: log, rate: r, burst: r, tokens: r, now: now, last: now()}
}

// take spends one token; when none is left it counts the line as
// suppressed. It returns the lines suppressed since the last line written.
func (a *accessLog) take() (ok bool, suppressed int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if el := now.Sub(a.last).Seconds(); el > 0 {
		a.tokens = min(a.burst, a.tokens+el*a.rate)
	}
	a.last = now
	if a.tokens < 1 {
		a.suppressed++
		return false, 0
	}
	a.tokens--
	suppressed, a.suppressed = a.suppressed, 0
	return true, suppressed
}

// accessRecord is what a request's log line says besides its status.
type accessRecord struct {
	start  time.Time
	method string
	path   string // path and query, secrets masked, cut to maxLoggedPath
	caller string // "key:<id>", "origin:<origin>", or "" before authentication
	remote string
	rows   int64

	// For metrics and traces.
	coll      string // the target's label (target.label)
	csv       bool
	coding    string // content coding of the body; "" identity
	dbWork    bool   // the request held a data slot
	cost      int    // its $filter's sqlstore.Cost
	firstByte time.Time
	span      trace.Span // nil when tracing is off
}

// maxLoggedPath bounds the path and query written per line.
const maxLoggedPath = 512

func newAccessRecord(ctx *fasthttp.RequestCtx) accessRecord {
	return accessRecord{start: time.Now(), method: string(ctx.Method()), path: loggedURI(ctx), remote: ctx.RemoteAddr().String()}
}

// write logs one request. The API key's secret is never part of a record:
// callers are named by key id (or browser origin).
func (a *accessLog) write(r *accessRecord, status int, bytes int64) {
	if a == nil {
		return
	}
	ok, suppressed := a.take()
	if !ok {
		return
	}
	caller := r.caller
	if caller == "" {
		caller = "-"
	}
	attrs := []slog.Attr{
		slog.Int("status", status),
		slog.String("method", r.method),
		slog.String("path", r.path),
		slog.String("caller", caller),
		slog.Int64("rows", r.rows),
		slog.Int64("bytes", bytes),
		slog.Float64("duration_ms", float64(time.Since(r.start).Microseconds())/1000),
		slog.String("remote", r.remote),
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}
