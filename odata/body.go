package odata

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/odata/query"
)

// pageBody is a page's response body. fasthttp calls WriteTo on the
// connection's goroutine, after the headers, and Close once the response is
// written or abandoned (also for HEAD, and when the client went away before
// any byte). Writes go straight to the connection as 64 KiB chunks, so a
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
	// firstWrite is when the first body bytes went to the connection, in
	// Unix nanoseconds (0: none yet), for the first-byte latency.
	firstWrite atomic.Int64
	streamCtx  context.Context // ends at StreamTimeout
	span       trace.Span      // the rows span, ended with the body

	once sync.Once
	pr   *io.PipeReader // only when fasthttp reads instead of WriteTo
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace Read.
func (b *pageBody) SupportsBodyWriteTo() bool { return true }

func (b *pageBody) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	if b.s.metrics != nil {
		cw.first = &b.firstWrite
	}
	err := b.s.stream(cw, b.enc, b)
	b.sent.Store(cw.n)
	if err != nil {
		reason := b.cutReason(err)
		b.s.metrics.streamCut(reason)
		b.s.log.Info("odata: response cut short", "collection", b.q.Collection.Name, "reason", reason, "err", err)
		b.span.RecordError(err)
		b.span.SetStatus(codes.Error, reason)
	}
	return cw.n, err
}

// cutReason names why a body ended early, most specific cause first: a
// slot taken for a waiting request, the server's shutdown deadline, the
// StreamTimeout (all three close the connection, so the write fails), a
// failed cursor, a client that accepted nothing for StallTimeout, or else
// a client that went away.
func (b *pageBody) cutReason(err error) string {
	switch {
	case b.grant.wasCut.Load():
		return cutStallPreempt
	case b.s.base.Err() != nil:
		return cutShutdown
	case b.streamCtx != nil && errors.Is(b.streamCtx.Err(), context.DeadlineExceeded):
		return cutStreamTime
	case errors.Is(err, errCursor):
		return cutDatabase
	case errors.Is(err, os.ErrDeadlineExceeded):
		return cutStallTimeout
	}
	return cutClientGone
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

// Close releases the cursor, the stream's context and the caller's turn.
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
		if t := b.firstWrite.Load(); t != 0 {
			b.rec.firstByte = time.Unix(0, t)
		}
		b.span.SetAttributes(attribute.Int64("odata.rows", b.rec.rows))
		b.span.End()
		b.s.finish(&b.rec, fasthttp.StatusOK, b.sent.Load(), time.Now())
		b.s.streams.Done()
	})
	return nil
}

type countingWriter struct {
	w     io.Writer
	n     int64
	first *atomic.Int64 // set to the time of the first write, when not nil
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.first != nil {
		c.first.Store(time.Now().UnixNano())
		c.first = nil
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// errCursor marks a body that ended because its cursor failed.
var errCursor = errors.New("the cursor failed")

// flushEvery is how much encoded JSON is collected before it is written:
// large enough for few writes, small enough to keep memory flat. fasthttp
// frames each write as a chunk through its 4 KiB connection buffer, in
// three system calls whatever the write's size, so the chunk size sets the
// write path's cost per byte.
const flushEvery = 64 << 10

// codedFlush is how much compressed output is gathered before it is
// written: compressed pages are a twentieth of their rows' size.
const codedFlush = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, flushEvery+4096); return &b }}

// stream writes the body: rows as the cursor yields them, then the link.
// Uncompressed JSON goes out in writes of about flushEvery bytes (one chunk
// each); compressed output is gathered to codedFlush bytes first.
func (s *Server) stream(w io.Writer, enc string, b *pageBody) error {
	q, cur, link := b.q, b.cur, b.link
	out := w
	var zbuf *bufio.Writer
	var closer compressor
	if enc != codingIdentity {
		zbuf = bufio.NewWriterSize(w, codedFlush)
		closer = getCompressor(enc, zbuf)
		defer putCompressor(enc, closer)
		out = closer
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := append((*bp)[:0], b.head...)
	plan := newRowPlan(q)
	first := true
	for cur.Next() {
		b.rows.Add(1)
		switch {
		case b.csv:
			buf = appendCSVRow(buf, q, cur.Values())
		case first:
			buf = plan.Append(buf, cur.Values())
		default:
			buf = plan.Append(append(buf, ','), cur.Values())
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
		return fmt.Errorf("rows: %w: %w", errCursor, err)
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
