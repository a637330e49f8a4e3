// Package jsonenc writes the JSON values of response rows without reflection:
// strings with the minimal escapes, and numbers the way JavaScript prints
// them (97, -0.25, 51.01, 1e-7), which is what the DataStream clients
// expect. It also writes whole rows (AppendRow) and owns the bound of their
// size (row.go): the store keeps a Width per column as it loads values, so
// that a page's size can be bounded before it is sent.
package jsonenc

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string. Bytes that are not valid UTF-8
// become U+FFFD; U+2028 and U+2029 are escaped so the output is also valid
// JavaScript.
func AppendString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Most text is plain ASCII: skip it eight bytes at a time.
		for i+8 <= len(s) && !special8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// special8 reports whether any of the eight bytes in x needs a look of its
// own: a control character, a quote, a backslash, or a byte of a multibyte
// character. Each test is exact for "some byte is": (v - 0x01…) &^ v has
// the high bit set in a byte's lane only if some byte of v is zero (and
// likewise below 0x20 with 0x20…).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	below := (x - ones*0x20) &^ x
	quote = (quote - ones) &^ quote
	backslash = (backslash - ones) &^ backslash
	return (below|quote|backslash|x)&highs != 0
}

// StringLen is len(AppendString(nil, s)) without building it.
func StringLen(s string) int {
	n := 2 + len(s)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n++
			case c < 0x20:
				n += 5
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 5 // one byte becomes \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 3
		}
		i += size
	}
	return n
}

// MaxNumberLen bounds the length of any number AppendFloat or AppendInt
// writes, for size estimates.
const MaxNumberLen = 24

// AppendFloat appends f as JavaScript's Number.prototype.toString would:
// the shortest decimal that reads back as f, in plain notation for
// 1e-6 <= |f| < 1e21 and exponent notation (1e-7, 1.5e+21) outside it.
// NaN and infinities, which JSON cannot hold, are written as null.
func AppendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		return append(dst, '0') // also -0, as JavaScript prints it
	}
	abs := math.Abs(f)
	if abs >= 1e-6 && abs < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	// Go writes e-07 / e+21; JavaScript writes e-7 / e+21.
	for i := start; i < len(dst); i++ {
		if dst[i] == 'e' && i+2 < len(dst) && dst[i+2] == '0' && i+3 < len(dst) {
			return append(dst[:i+2], dst[i+3:]...)
		}
	}
	return dst
}

// AppendInt appends n in decimal.
func AppendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
