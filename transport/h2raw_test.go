package transport_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2 is a raw HTTP/2 client of the gRPC port, for what a gRPC client
// library will not do: floods, streams without messages, never reading.
type h2 struct {
	t  *testing.T
	nc net.Conn
	fr *http2.Framer // reads; writes only from the test's goroutine
	bw *bufio.Writer
	// wmu: writes from two goroutines (the test's and the PING answerer)
	wmu sync.Mutex
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// dialH2 connects and sends the preface and an empty SETTINGS; it does not
// wait for the server's.
func dialH2(t *testing.T, addr string) *h2 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return clientH2(t, nc)
}

// clientH2 is dialH2 on a connection of the caller's (TLS, say).
func clientH2(t *testing.T, nc net.Conn) *h2 {
	t.Helper()
	t.Cleanup(func() { nc.Close() })
	c := &h2{t: t, nc: nc, bw: bufio.NewWriterSize(nc, 64<<10)}
	c.fr = http2.NewFramer(c.bw, bufio.NewReader(nc))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.enc = hpack.NewEncoder(&c.hb)
	c.write(func() error {
		if _, err := io.WriteString(c.bw, http2.ClientPreface); err != nil {
			return err
		}
		return c.fr.WriteSettings()
	})
	return c
}

// write runs w (framer writes) and flushes, under wmu.
func (c *h2) write(w func() error) {
	c.t.Helper()
	if err := c.tryWrite(w); err != nil {
		c.t.Fatal(err)
	}
}

func (c *h2) tryWrite(w func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := w(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// headers writes a gRPC request's HEADERS (unflushed: inside write).
func (c *h2) headers(id uint32, path string, end bool) error {
	return c.headersWith(id, end, ":path", path)
}

// headersWith is headers with fields (name, value, ...) over the defaults
// of an RLS call; extra fields go last.
func (c *h2) headersWith(id uint32, end bool, fields ...string) error {
	c.hb.Reset()
	fs := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	for i := 0; i+1 < len(fields); i += 2 {
		found := false
		for j := range fs {
			if fs[j][0] == fields[i] {
				fs[j][1], found = fields[i+1], true
			}
		}
		if !found {
			fs = append(fs, [2]string{fields[i], fields[i+1]})
		}
	}
	for _, f := range fs {
		c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndHeaders: true, EndStream: end})
}

// message writes msg as one gRPC message ending the stream.
func (c *h2) message(id uint32, msg []byte) error {
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	return c.fr.WriteData(id, true, append(b, msg...))
}

// settled answers the server's SETTINGS and waits for the ack of ours.
func (c *h2) settled() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for acked, answered := false, false; !acked || !answered; {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("handshake: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if sf.IsAck() {
				acked = true
			} else {
				c.write(c.fr.WriteSettingsAck)
				answered = true
			}
		}
	}
}

func fieldOf(mh *http2.MetaHeadersFrame, name string) string {
	for _, f := range mh.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// untilClosed reads (answering PINGs, as a client does) until the server
// ends the connection, and returns the last GOAWAY's code, or -1 if none
// came; it fails if the connection is still open after bound.
func (c *h2) untilClosed(bound time.Duration) http2.ErrCode {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(bound))
	code := http2.ErrCode(1<<32 - 1)
	for {
		f, err := c.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			c.t.Fatalf("the connection is still open after %v", bound)
		case err != nil:
			return code
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			code = f.ErrCode
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.tryWrite(func() error { return c.fr.WritePing(true, f.Data) })
			}
		}
	}
}
