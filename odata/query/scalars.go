package query

import (
	"time"
)

// TimestampLayout is the stored and returned form of timestamps.
const TimestampLayout = "2006-01-02T15:04:05.000Z"

var instantLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

// ParseInstant accepts a date or a date-time (UTC when no offset is given)
// and returns it in TimestampLayout. A date means its midnight UTC.
func ParseInstant(s string) (string, bool) {
	if len(s) == 10 {
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return "", false
		}
		return t.UTC().Format(TimestampLayout), true
	}
	for _, l := range instantLayouts {
		if t, err := time.Parse(l, s); err == nil {
			t = t.UTC()
			if t.Year() < 0 || t.Year() > 9999 {
				return "", false
			}
			return t.Format(TimestampLayout), true
		}
	}
	return "", false
}

// FormatUUID writes 16 bytes as a version 4 (random) UUID in lower case,
// setting the version and variant bits.
func FormatUUID(b [16]byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// ParseUUID accepts the 8-4-4-4-12 hexadecimal form and returns it in lower case.
func ParseUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false
			}
			continue
		}
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			b[i] = c + 'a' - 'A'
		default:
			return "", false
		}
	}
	return string(b), true
}
