package h2grpc

import (
	"fmt"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// reqHeaders is what the reader keeps of a request's header block.
type reqHeaders struct {
	method, path, contentType, timeout, encoding string
	// contentLength is the content-length field, or -1.
	contentLength int64
	pseudo        uint8 // pseudo-header fields seen (pseudoMethod, ...)
	pseudoDone    bool  // a regular field was seen
	// malformed says why the request is malformed (RFC 9113 section
	// 8.1.1): a stream error, answered RST_STREAM(PROTOCOL_ERROR).
	malformed string
}

const (
	pseudoMethod uint8 = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

func (h *reqHeaders) reset() { *h = reqHeaders{contentLength: -1} }

// onField collects one decoded header field of the current block and
// checks it against RFC 9113 sections 8.2 and 8.3. The fields every gRPC
// client sends are matched by name, which is all the validation their
// names need; only other names are checked byte by byte.
func (c *conn) onField(f hpack.HeaderField) {
	c.hdrSize += f.Size()
	if c.hdrSize > c.s.o.MaxHeaderListSize {
		c.hdrTooLarge = true
		return
	}
	h := &c.hdr
	if h.malformed != "" {
		return
	}
	if !validFieldValue(f.Value) {
		h.malformed = fmt.Sprintf("header field %q has a value with NUL, CR, LF or surrounding whitespace", f.Name)
		return
	}
	if len(f.Name) > 0 && f.Name[0] == ':' {
		if h.pseudoDone {
			h.malformed = fmt.Sprintf("pseudo-header field %s after a regular field", f.Name)
			return
		}
		var bit uint8
		switch f.Name {
		case ":method":
			bit, h.method = pseudoMethod, f.Value
		case ":path":
			bit, h.path = pseudoPath, f.Value
		case ":scheme":
			bit = pseudoScheme
		case ":authority":
			bit = pseudoAuthority
		default: // :status, :protocol (not offered) and unknown ones
			h.malformed = fmt.Sprintf("pseudo-header field %q is not one of a request", f.Name)
			return
		}
		if h.pseudo&bit != 0 {
			h.malformed = "duplicated pseudo-header field " + f.Name
		}
		h.pseudo |= bit
		return
	}
	h.pseudoDone = true
	switch f.Name {
	case "content-type":
		h.contentType = f.Value
	case "grpc-timeout":
		h.timeout = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "te":
		if f.Value != "trailers" {
			h.malformed = fmt.Sprintf("te is %q, not \"trailers\"", f.Value)
		}
	case "content-length":
		n, ok := parseContentLength(f.Value)
		if !ok || h.contentLength >= 0 && h.contentLength != n {
			h.malformed = fmt.Sprintf("content-length %q is not one decimal number", f.Value)
		}
		h.contentLength = n
	case "user-agent", "grpc-accept-encoding", "accept-encoding", "grpc-trace-bin", "traceparent":
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = "connection-specific header field " + f.Name
	default:
		if !validFieldName(f.Name) {
			h.malformed = fmt.Sprintf("header field name %q has a character HTTP/2 forbids (uppercase, colon, control, space or non-ASCII)", f.Name)
		}
	}
}

// checkRequest judges what only the whole block shows: the pseudo-header
// fields a request must have (RFC 9113 section 8.3.1).
func (h *reqHeaders) checkRequest(ended bool) {
	switch {
	case h.malformed != "":
	case h.pseudo&pseudoMethod == 0:
		h.malformed = "no :method"
	case h.pseudo&pseudoScheme == 0:
		h.malformed = "no :scheme"
	case h.pseudo&pseudoPath == 0 || h.path == "":
		h.malformed = "no :path or an empty one"
	case h.path[0] != '/' && (h.method != "OPTIONS" || h.path != "*"):
		h.malformed = fmt.Sprintf(":path %q is not absolute", h.path)
	case ended && h.contentLength > 0:
		h.malformed = fmt.Sprintf("content-length %d with no content", h.contentLength)
	}
}

// malformedData resets a stream whose DATA makes the request malformed (a
// stream error, RFC 9113 section 8.1.1), without an answer.
func (c *conn) malformedData(st *stream, why string) {
	c.release(st)
	st.method, st.streaming, st.bidi = nil, nil, nil
	c.mu.Lock()
	c.endLocked(st)
	c.mu.Unlock()
	c.resetStream(st.id, http2.ErrCodeProtocol)
	c.s.o.Log.Debug("malformed gRPC request", "remote", c.nc.RemoteAddr().String(), "stream", st.id, "error", why)
}

// badNameByte marks the bytes RFC 9113 section 8.2.1 forbids in a field
// name: controls, space, uppercase, DEL, non-ASCII, and the colon outside
// pseudo-header fields.
var badNameByte = func() (t [256]bool) {
	for i := range t {
		t[i] = i <= 0x20 || i >= 'A' && i <= 'Z' || i >= 0x7f || i == ':'
	}
	return t
}()

func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if badNameByte[s[i]] {
			return false
		}
	}
	return true
}

// validFieldValue: no NUL, CR or LF anywhere, no SP or HTAB at either end.
// Eight bytes at a time while none is below 0x0e (rare in a value), which
// keeps the check out of the call's cost.
func validFieldValue(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if (x-ones*0x0e)&^x&highs != 0 {
			break // a byte below 0x0e: the loop below looks closer
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c <= '\r' && (c == 0 || c == '\r' || c == '\n') {
			return false
		}
	}
	if n := len(s); n > 0 {
		if a, z := s[0], s[n-1]; a == ' ' || a == '\t' || z == ' ' || z == '\t' {
			return false
		}
	}
	return true
}

// parseContentLength reads 1 to 18 decimal digits.
func parseContentLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return -1, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}
