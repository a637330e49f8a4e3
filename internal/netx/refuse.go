package netx

import (
	"encoding/binary"
	"net"
	"syscall"
)

// httpRefusal is the answer to an HTTP/1.1 connection beyond the cap.
const httpRefusal = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Connection: close\r\n" +
	"Retry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 21\r\n\r\n" +
	"too many connections\n"

// RefuseHTTP answers an HTTP/1.1 connection 503 with Retry-After.
func RefuseHTTP(c net.Conn) { _, _ = c.Write([]byte(httpRefusal)) }

// RefuseHTTP2 answers an HTTP/2 (gRPC) connection with the server's
// preface (empty SETTINGS) and a GOAWAY that accepted no stream, code
// ENHANCE_YOUR_CALM: a gRPC client reports Unavailable and may retry.
func RefuseHTTP2(c net.Conn) { _, _ = c.Write(http2Refusal()) }

func http2Refusal() []byte {
	const debug = "too many connections"
	b := []byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0} // SETTINGS, no parameters
	goaway := make([]byte, 9+8+len(debug))
	n := 8 + len(debug)
	goaway[0], goaway[1], goaway[2] = byte(n>>16), byte(n>>8), byte(n)
	goaway[3] = 0x7                              // GOAWAY on stream 0
	binary.BigEndian.PutUint32(goaway[9:], 0)    // last stream id: none
	binary.BigEndian.PutUint32(goaway[13:], 0xb) // ENHANCE_YOUR_CALM
	copy(goaway[17:], debug)
	return append(b, goaway...)
}

// FileLimit is the process's soft limit on open files (0 if unknown).
func FileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

// ShareOfFiles is the connection cap that leaves a listener share
// (percent) of the file limit: the caps of a process's listeners sum to
// less than its limit, so that a flood on one port runs into its own cap,
// not into the process's limit. 0 (no cap) when the limit is unknown.
func ShareOfFiles(percent int) int {
	lim := FileLimit()
	if lim == 0 {
		return 0
	}
	return max(16, lim*percent/100)
}
