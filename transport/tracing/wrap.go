package tracing

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/engine"
)

// Span names, as the reference service's where it has one.
const (
	SpanDecision = "ShouldRateLimit Execution"
	SpanBatch    = "Backend Batch Execution"
)

// CounterSpanName is the reference's name for a request's counter round trip
// on a backend kind: "Redis Pipeline Execution", "Memcached Fetch Execution".
func CounterSpanName(backend string) string {
	switch backend {
	case "redis", "":
		return "Redis Pipeline Execution"
	case "memcache":
		return "Memcached Fetch Execution"
	}
	return "Counter Increment Execution"
}

// Decider is the decision calls the gRPC and HTTP servers make.
type Decider interface {
	ShouldRateLimit(ctx context.Context, req *engine.Request) (*engine.Response, error)
	ShouldRateLimitBatch(ctx context.Context, batch engine.Batch, items []engine.BatchItem)
}

// Decider wraps d with a span per decision.
func (t *Tracing) Decider(d Decider) Decider { return &decider{t: t, d: d} }

type decider struct {
	t *Tracing
	d Decider
}

func (d *decider) ShouldRateLimit(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	ctx, span := d.t.tracer.Start(ctx, SpanDecision, trace.WithAttributes(
		attribute.String("domain", req.Domain),
		attribute.String("request string", requestString(req)),
	))
	defer span.End()
	resp, err := d.d.ShouldRateLimit(ctx, req)
	if err == nil {
		span.SetAttributes(attribute.String("overall code", resp.OverallCode.String()))
	}
	return resp, recordError(span, err)
}

// ShouldRateLimitBatch decides the batch under one span, which counts its
// requests and the failed ones.
func (d *decider) ShouldRateLimitBatch(ctx context.Context, batch engine.Batch, items []engine.BatchItem) {
	ctx, span := d.t.tracer.Start(ctx, SpanDecision, trace.WithAttributes(attribute.Int("batch size", len(items))))
	defer span.End()
	d.d.ShouldRateLimitBatch(ctx, batch, items)
	failed := 0
	var first error
	for i := range items {
		if items[i].Err != nil {
			failed++
			if first == nil {
				first = items[i].Err
			}
		}
	}
	if failed > 0 {
		span.SetAttributes(attribute.Int("failed", failed))
		recordError(span, first)
	}
}

// recordError marks the span failed with err, if any, and returns err.
func recordError(span trace.Span, err error) error {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// requestString is a compact text form of the request for the span.
func requestString(req *engine.Request) string {
	var b strings.Builder
	b.WriteString("domain:")
	b.WriteString(strconv.Quote(req.Domain))
	for _, d := range req.Descriptors {
		b.WriteString(" descriptors:{")
		for i, e := range d.Entries {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.Key)
			b.WriteByte('=')
			b.WriteString(e.Value)
		}
		b.WriteByte('}')
	}
	if req.HitsAddend > 0 {
		b.WriteString(" hits_addend:")
		b.WriteString(strconv.FormatUint(uint64(req.HitsAddend), 10))
	}
	return b.String()
}

// Counter wraps c with a span per request's counter round trip, named for
// the backend kind, child of the decision span.
// A counter that answers within a bound of its own (engine.WaitBounder)
// keeps saying so through the wrapper: the engine then sets no timer of
// its own per decision.
func (t *Tracing) Counter(c engine.Counter, backend string) engine.Counter {
	tc := &counter{t: t, c: c, name: CounterSpanName(backend)}
	if wb, ok := c.(engine.WaitBounder); ok {
		return &boundedCounter{counter: tc, wb: wb}
	}
	return tc
}

// boundedCounter is a traced counter whose callee is an engine.WaitBounder.
type boundedCounter struct {
	*counter
	wb engine.WaitBounder
}

func (c *boundedCounter) WaitBound() time.Duration { return c.wb.WaitBound() }

type counter struct {
	t    *Tracing
	c    engine.Counter
	name string
}

func (c *counter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	perSecond := 0
	for i := range ops {
		if ops[i].PerSecond {
			perSecond++
		}
	}
	ctx, span := c.t.tracer.Start(ctx, c.name, trace.WithAttributes(
		attribute.Int("batch size", len(ops)),
		attribute.Int("pipeline length", len(ops)-perSecond),
		attribute.Int("perSecondPipeline length", perSecond),
	))
	defer span.End()
	return recordError(span, c.c.Apply(ctx, ops, batch))
}

// Backend wraps b with a span per backend call. A shard's call serves the
// coalesced increments of many requests, so the span starts its own trace
// (subject to the sampling rate) and carries the batch size.
func (t *Tracing) Backend(b engine.Backend, backend string) engine.Backend {
	return &tracedBackend{t: t, b: b, kind: backend}
}

type tracedBackend struct {
	t    *Tracing
	b    engine.Backend
	kind string
}

func (b *tracedBackend) Exec(ctx context.Context, batch []engine.CounterOp) error {
	ctx, span := b.t.tracer.Start(ctx, SpanBatch, trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("backend", b.kind),
		attribute.Int("batch size", len(batch)),
	))
	defer span.End()
	return recordError(span, b.b.Exec(ctx, batch))
}

func (b *tracedBackend) Close() error { return b.b.Close() }

// Inline keeps the wrapped backend's answer: the shards run inline backends
// (memory) on their own goroutine.
func (b *tracedBackend) Inline() bool {
	ib, ok := b.b.(interface{ Inline() bool })
	return ok && ib.Inline()
}
