package jsonenc

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{97, "97"}, {-0.25, "-0.25"}, {51.01, "51.01"}, {0, "0"}, {math.Copysign(0, -1), "0"},
		{1e-7, "1e-7"}, {1.5e-7, "1.5e-7"}, {1e-6, "0.000001"}, {123456789012345680000, "123456789012345680000"},
		{1e21, "1e+21"}, {-2.5e-10, "-2.5e-10"}, {1e300, "1e+300"},
		{math.NaN(), "null"}, {math.Inf(1), "null"},
	} {
		if got := string(AppendFloat(nil, c.f)); got != c.want {
			t.Errorf("AppendFloat(%v) = %s, want %s", c.f, got, c.want)
		}
		if got := len(AppendFloat(nil, c.f)); got > MaxNumberLen {
			t.Errorf("AppendFloat(%v) is %d bytes, more than MaxNumberLen", c.f, got)
		}
	}
	a, b := 0.1, 0.2
	if got := string(AppendFloat(nil, a+b)); got != "0.30000000000000004" {
		t.Errorf("0.1+0.2 = %s", got)
	}
	if got := len(AppendInt(nil, math.MinInt64)); got > MaxNumberLen {
		t.Errorf("MinInt64 is %d bytes", got)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "tab\tnl\ncr\r", "\x00\x1f", "été", "\u2028\u2029", "\xff\xfe bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, []byte(s))
		if len(out) != StringLen(s) {
			t.Fatalf("StringLen(%q) = %d, encoded %d bytes: %s", s, StringLen(s), len(out), out)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, out, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if utf8.ValidString(s) && back != s || !utf8.ValidString(s) && len(back) < len(want)-3*len(s) {
			t.Fatalf("%q -> %s -> %q", s, out, back)
		}
	})
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, -1, 0.5, 1e-7, 1e21, 123.456, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		out := AppendFloat(nil, v)
		if len(out) > MaxNumberLen {
			t.Fatalf("%v -> %s longer than MaxNumberLen", v, out)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		var back float64
		if err := json.Unmarshal(out, &back); err != nil || back != v && !(v == 0 && back == 0) {
			t.Fatalf("%v -> %s -> %v, %v", v, out, back, err)
		}
	})
}
