package kvlist_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/kvlist"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []kvlist.Pair
		wantErr string
	}{
		{in: "", want: nil},
		{in: " , ,", want: nil},
		{in: "a=1", want: []kvlist.Pair{{"a", "1"}}},
		{in: " a = 1 ,b=2,a=3", want: []kvlist.Pair{{"a", "1"}, {"b", "2"}, {"a", "3"}}},
		{in: "k=v=w", want: []kvlist.Pair{{"k", "v=w"}}},
		{in: "k=", want: []kvlist.Pair{{"k", ""}}},
		{in: "a=1,nokey", wantErr: `"nokey" is not key=value`},
		{in: " =v", wantErr: `" =v" is not key=value`},
	} {
		got, err := kvlist.Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a=1", "a=1,b=2", "=", ",,,", "k=v=w", "a:1", " x = y "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pairs, err := kvlist.Parse(s)
		if err != nil {
			return
		}
		for _, p := range pairs {
			if p.Key == "" || strings.TrimSpace(p.Key) != p.Key || strings.ContainsAny(p.Key, ",=") ||
				strings.TrimSpace(p.Value) != p.Value || strings.Contains(p.Value, ",") {
				t.Fatalf("%q → bad pair %q", s, p)
			}
		}
	})
}
