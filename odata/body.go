package odata

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/query"
)

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
