package query

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrUndecodable reports a query string that is not valid percent-encoded
// UTF-8. The real service refuses it before any parsing, with a body whose
// message is null; the HTTP layer keeps that shape.
var ErrUndecodable = errors.New("query string cannot be decoded")

// Param is one decoded name=value pair of a query string, in request order.
type Param struct {
	Name, Value string
}

// Decode splits a raw query string (without the leading '?') into decoded
// pairs. '+' is a space, as form encoding has it, and %XX is a byte; both
// `%24top` and `$top` therefore name the same option. Empty segments are
// skipped; a segment without '=' has an empty value.
func Decode(raw []byte) ([]Param, error) {
	var out []Param
	for len(raw) > 0 {
		var seg []byte
		seg, raw = cut(raw, '&')
		if len(seg) == 0 {
			continue
		}
		name, value := cut(seg, '=')
		n, err := unescape(name)
		if err != nil {
			return nil, err
		}
		v, err := unescape(value)
		if err != nil {
			return nil, err
		}
		out = append(out, Param{Name: n, Value: v})
	}
	return out, nil
}

func cut(b []byte, sep byte) (before, after []byte) {
	for i, c := range b {
		if c == sep {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

func unescape(b []byte) (string, error) {
	plain := true
	for _, c := range b {
		if c == '%' || c == '+' {
			plain = false
			break
		}
	}
	if plain {
		if !utf8.Valid(b) {
			return "", ErrUndecodable
		}
		return string(b), nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '+':
			out = append(out, ' ')
		case '%':
			if i+2 >= len(b) {
				return "", ErrUndecodable
			}
			hi, ok1 := unhex(b[i+1])
			lo, ok2 := unhex(b[i+2])
			if !ok1 || !ok2 {
				return "", ErrUndecodable
			}
			out = append(out, hi<<4|lo)
			i += 2
		default:
			out = append(out, c)
		}
	}
	if !utf8.Valid(out) {
		return "", ErrUndecodable
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// AppendEscaped appends s percent-encoded for a query string value. Letters,
// digits, -._~ and the sub-delimiters '()*!,$ stay raw (the real service's
// links keep quotes and commas readable); everything else, including space,
// ':', '&', '=', '+', '#' and '%', is %XX. The result never holds a raw
// space, so a shell client can pass it unquoted.
func AppendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if rawInLink(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

func rawInLink(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '\'', '(', ')', '*', '!', ',', '$':
		return true
	}
	return false
}

// AppendNextQuery appends the query string of the next page's link: first
// $skiptoken, then $top, then every other option of the request in its
// original order (the Python, JS and shell clients follow the link verbatim
// and add nothing of their own).
func (q *Query) AppendNextQuery(dst []byte, last Key) []byte {
	dst = append(dst, "$skiptoken="...)
	dst = AppendEscaped(dst, last.Token())
	dst = append(dst, "&$top="...)
	dst = strconv.AppendInt(dst, int64(q.Top), 10)
	for _, p := range q.carry {
		dst = append(dst, '&')
		dst = AppendEscaped(dst, p.Name)
		dst = append(dst, '=')
		dst = AppendEscaped(dst, p.Value)
	}
	return dst
}
