package odata

import (
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"
)

// Content codings of a response body, in the server's order of preference
// when a client accepts several with the same q-value.
const (
	codingIdentity = ""
	codingBrotli   = "br"
	codingZstd     = "zstd"
	codingGzip     = "gzip"
)

// Compression levels. They were chosen by measuring a 10,000-row page
// (make bench, OData section): brotli 3 takes about half the CPU of gzip's
// default level 6 and gives a smaller body; gzip stays at level 1 as
// before; zstd's fastest level is below both in CPU.
const (
	brotliLevel = 3
	// brotliWindow is log2 of brotli's sliding window: 1 MiB instead of
	// the default 4 MiB keeps a response's memory small; JSON rows repeat
	// within a few kilobytes, so the ratio hardly changes.
	brotliWindow = 20
	gzipLevel    = gzip.BestSpeed
	zstdWindow   = 1 << 20
)

// negotiate picks the response coding from an Accept-Encoding header
// (RFC 9110 §12.5.3): the enabled coding with the highest q-value; ties go
// to br, then zstd, then gzip. "*" stands for every coding not listed.
// Identity is always acceptable: a client that refuses it still gets an
// uncompressed body rather than a 406 (odata-compat.md).
//
// A request that offers br and nothing else never gets br: the shell
// client sends "Accept-Encoding: br" without asking curl to decode, and the
// Python client sends it whether or not the brotli module is installed
// (odata-compat.md), while every HTTP stack that really decodes br offers
// gzip beside it.
func (o *Options) negotiate(accept string) string {
	if accept == "" {
		return codingIdentity
	}
	q := map[string]float64{}
	star := -1.0
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		v := 1.0
		for _, p := range strings.Split(params, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || f < 0 || f > 1 {
					f = 0 // a malformed weight is not a reason to compress
				}
				v = f
			}
		}
		if name == "x-gzip" {
			name = codingGzip
		}
		if name == "*" {
			star = v
			continue
		}
		if prev, ok := q[name]; !ok || v > prev {
			q[name] = v
		}
	}
	others := star > 0 // a coding other than br is offered
	for name, v := range q {
		if v > 0 && name != codingBrotli && name != "identity" {
			others = true
		}
	}
	best, bestQ := codingIdentity, 0.0
	for _, c := range []struct {
		name string
		on   bool
	}{{codingBrotli, o.Brotli}, {codingZstd, o.Zstd}, {codingGzip, o.Gzip}} {
		if !c.on || (c.name == codingBrotli && !others) {
			continue
		}
		v, listed := q[c.name]
		if !listed {
			v = max(star, 0)
		}
		if v > bestQ {
			best, bestQ = c.name, v
		}
	}
	return best
}

// compressor is a pooled encoder of one coding. Encoders hold windows and
// hash tables of a megabyte or more: pooling keeps a busy server from
// allocating one per page.
type compressor interface {
	io.WriteCloser
	Reset(w io.Writer)
}

var (
	gzipPool   = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzipLevel); return w }} // the level is valid
	brotliPool = sync.Pool{New: func() any {
		w, _ := brotli.NewWriterOptions(nil, brotliLevel, brotli.WriterOptions{LGWin: brotliWindow}) // level and window are valid
		return w
	}}
	zstdPool = sync.Pool{New: func() any {
		w, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(zstdWindow), zstd.WithLowerEncoderMem(true)) // the options are valid
		return &zstdWriter{w}
	}}
)

// zstdWriter adapts the zstd encoder's Reset to the compressor interface.
type zstdWriter struct{ *zstd.Encoder }

func (z *zstdWriter) Reset(w io.Writer) { z.Encoder.Reset(w) }

// getCompressor returns a pooled encoder writing to w, or nil for identity.
func getCompressor(coding string, w io.Writer) compressor {
	var c compressor
	switch coding {
	case codingGzip:
		c = gzipPool.Get().(*gzip.Writer)
	case codingBrotli:
		c = brotliPool.Get().(*brotli.Writer)
	case codingZstd:
		c = zstdPool.Get().(*zstdWriter)
	default:
		return nil
	}
	c.Reset(w)
	return c
}

// putCompressor returns an encoder to its pool, detached from its writer.
func putCompressor(coding string, c compressor) {
	if c == nil {
		return
	}
	c.Reset(io.Discard)
	switch coding {
	case codingGzip:
		gzipPool.Put(c)
	case codingBrotli:
		brotliPool.Put(c)
	case codingZstd:
		zstdPool.Put(c)
	}
}
