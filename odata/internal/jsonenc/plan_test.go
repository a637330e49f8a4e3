package jsonenc

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"testing/quick"
	"unicode/utf8"
)

// appendStringByByte is AppendString without the eight-byte skip: every
// byte looked at on its own. The fast path must write the same bytes.
func appendStringByByte(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
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
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&15])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Every byte value at every position of a 16-byte plain run, so that each
// lane of the eight-byte test sees each byte.
func TestAppendStringEveryByteEveryLane(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 16; pos++ {
			s := bytes.Repeat([]byte{'a'}, 16)
			s[pos] = byte(c)
			if got, want := AppendString(nil, s), appendStringByByte(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("byte %#x at %d: %q, want %q", c, pos, got, want)
			}
		}
	}
}

func TestAppendStringRandom(t *testing.T) {
	pieces := []string{"a", "abcdefgh", "é", "\"", "\\", "\n", "\x01", "\x1f", " ", "\x7f", "\u2028", "\u2029", "\xff", "水", "\t", "~"}
	property := func(seed1, seed2 uint64) bool {
		r := rand.New(rand.NewPCG(seed1, seed2))
		var s []byte
		for n := r.IntN(40); n > 0; n-- {
			s = append(s, pieces[r.IntN(len(pieces))]...)
		}
		got, want := AppendString(nil, s), appendStringByByte(nil, s)
		if !bytes.Equal(got, want) {
			t.Logf("%q: %q, want %q", s, got, want)
		}
		return bytes.Equal(got, want)
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
}

func FuzzAppendStringByByte(f *testing.F) {
	for _, s := range []string{"", "plain text, longer than eight", "12345678\"", "abcdefg\xe2\x80\xa8", "\xff\xfe bad bytes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString(nil, []byte(s)), appendStringByByte(nil, []byte(s)); !bytes.Equal(got, want) {
			t.Fatalf("%q: %q, want %q", s, got, want)
		}
	})
}

// A row plan writes exactly what AppendRow writes.
func TestRowPlanMatchesAppendRow(t *testing.T) {
	property := func(seed1, seed2 uint64) bool {
		q, vals := randomRow(rand.New(rand.NewPCG(seed1, seed2)))
		keys := Keys(q.Collection)
		got, want := NewRowPlan(q, keys).Append(nil, vals), AppendRow(nil, q, keys, vals)
		if !bytes.Equal(got, want) {
			t.Logf("%s, want %s", got, want)
		}
		return bytes.Equal(got, want)
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}
