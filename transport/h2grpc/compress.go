package h2grpc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/codes"
)

// Compression (gRPC's compression.md). Requests may come gzip-coded
// (grpc-encoding: gzip, and the message's compressed flag); answers are
// never coded, which every client takes. The answers to a request that
// named a coding carry grpc-accept-encoding, and a coding we do not know
// is answered UNIMPLEMENTED with it, as the spec asks. A unary request is
// inflated by the reader once it is whole, a bidirectional call's message
// by its recv; within MaxRecvMsgSize and counted in MaxRequestBytes like
// any request.

// acceptedEncodings is what grpc-accept-encoding says we take. grpc-js
// stops coding its requests when a server's list lacks its coding.
const acceptedEncodings = "identity,gzip"

// acceptEncoding notes st's grpc-encoding; false for one we cannot read.
func (c *conn) acceptEncoding(st *stream, enc string) bool {
	switch enc {
	case "", "identity":
	case "gzip":
		st.gzip = true
	default:
		st.coded = true
		return false
	}
	st.coded = enc != ""
	return true
}

var gzipReaders sync.Pool // *gzip.Reader

// inflate replaces st's whole, gzip-coded request with its message
// decoded, or says why it cannot (a status for the call).
func (c *conn) inflate(st *stream) (codes.Code, string) {
	o := &c.s.o
	out, code, why := c.inflateMsg((*st.msg)[5:])
	if code != codes.OK {
		return code, why
	}
	grow := int64(len(*out) - len(*st.msg))
	c.mu.Lock()
	full := c.buffered+grow > int64(o.MaxRequestBytes)
	if !full {
		c.buffered += grow
		st.charged += int(grow)
	}
	c.mu.Unlock()
	if full {
		putBuf(out)
		return codes.ResourceExhausted, fmt.Sprintf("grpc: the connection's requests in progress exceed %d bytes", o.MaxRequestBytes)
	}
	putBuf(st.msg)
	st.msg = out
	return codes.OK, ""
}

// inflateMsg decodes the gzip-coded message in, within MaxRecvMsgSize,
// into a buffer with the 5-byte prefix of an uncoded message, or says
// why it cannot (a status for the call).
func (c *conn) inflateMsg(in []byte) (*[]byte, codes.Code, string) {
	o := &c.s.o
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(in))
	} else {
		err = zr.Reset(bytes.NewReader(in))
	}
	if err != nil {
		return nil, codes.Internal, "grpc: failed to decompress the received message: " + err.Error()
	}
	defer gzipReaders.Put(zr)
	out := getBuf(5 + 4*len(in))
	b := append(*out, 0, 0, 0, 0, 0)
	// One byte past the limit tells a message that is too large.
	b, err = readAllInto(b, io.LimitReader(zr, int64(o.MaxRecvMsgSize)+1))
	*out = b
	if err != nil {
		putBuf(out)
		return nil, codes.Internal, "grpc: failed to decompress the received message: " + err.Error()
	}
	if n := len(b) - 5; n > o.MaxRecvMsgSize {
		putBuf(out)
		return nil, codes.ResourceExhausted, fmt.Sprintf("grpc: received message after decompression larger than max %d", o.MaxRecvMsgSize)
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return out, codes.OK, ""
}

// readAllInto appends what r yields to b, as io.ReadAll does into a
// buffer of its own.
func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// respHeadersFor is the response HEADERS block of st's answer.
func respHeadersFor(st *stream) []byte {
	if st.coded {
		return respHeadersCoded
	}
	return respHeaders
}

// trailersOnlyFor is a response to st that is only a status.
func trailersOnlyFor(st *stream, code codes.Code, msg string) []byte {
	return append(append([]byte(nil), respHeadersFor(st)...), trailers(code, msg)...)
}

var respHeadersCoded = appendLiteral(append([]byte(nil), respHeaders...), 0, "grpc-accept-encoding", acceptedEncodings)
