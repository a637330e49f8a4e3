package h2grpc

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// discardConn takes every write and reads what it was given, again and
// again.
type discardConn struct {
	net.Conn
	in  []byte
	off int
}

func (d *discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (d *discardConn) SetWriteDeadline(time.Time) error { return nil }
func (d *discardConn) Read(p []byte) (int, error) {
	n := copy(p, d.in[d.off:])
	if d.off += n; d.off == len(d.in) {
		d.off = len(clientPreface) // the preface once
	}
	return n, nil
}

// BenchmarkGuard: what the guard adds to a write and a read of 32 KiB of
// small frames (answers: HEADERS, DATA, trailers; requests: HEADERS, DATA),
// per frame.
func BenchmarkGuard(b *testing.B) {
	var out, in bytes.Buffer
	ofr, ifr := http2.NewFramer(&out, nil), http2.NewFramer(&in, nil)
	in.WriteString(http2.ClientPreface)
	frames := 0
	for id := uint32(1); out.Len() < 32<<10; id += 2 {
		ofr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x88}, EndHeaders: true})
		ofr.WriteData(id, false, make([]byte, 30))
		ofr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x40, 1, 'a', 1, '0'}, EndHeaders: true, EndStream: true})
		ifr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x83, 0x86}, EndHeaders: true})
		ifr.WriteData(id, true, make([]byte, 40))
		frames += 5
	}
	g := Guard(&discardConn{in: in.Bytes()}, GuardOptions{MaxOpenStreams: 1 << 30})
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		g.Read(buf)
		g.Write(out.Bytes())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(frames), "ns/frame")
}
