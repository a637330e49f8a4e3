package harness

import (
	"strings"
	"testing"
)

func TestDecodePage(t *testing.T) {
	tests := []struct {
		name string
		in   string
		rows int
		ok   bool
	}{
		{"empty page", `{"value":[]}`, 0, true},
		{"rows and a next link", `{"value":[{"Id":1,"DOI":"10.1/x"},{"Id":2,"DOI":null}],"@odata.nextLink":"http://h/v1/odata/v4/Records?$skiptoken=Id:2&$top=2"}`, 2, true},
		{"link first", `{"@odata.nextLink":"x","value":[{"Id":1}]}`, 1, true},
		{"trailing whitespace", "{\"value\":[{\"Id\":1}]}\n", 1, true},
		{"nested values in a row", `{"value":[{"Id":1,"Keywords":["a","b"],"TemporalExtent":null}]}`, 1, true},
		{"count answer has no rows array", `{"value":"3930"}`, 0, false},
		{"no value member", `{"@odata.nextLink":"x"}`, 0, false},
		{"row without Id", `{"value":[{"DOI":"x"}]}`, 0, false},
		{"row not an object", `{"value":[1,2]}`, 0, false},
		{"cut short in a row", `{"value":[{"Id":1},{"Id":`, 1, false},
		{"cut short after the array", `{"value":[{"Id":1}]`, 1, false},
		{"data after the page", `{"value":[{"Id":1}]} {"value":[]}`, 1, false},
		{"not an object", `[{"Id":1}]`, 0, false},
		{"error body", `{"message":null}`, 0, false},
		{"empty", ``, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := DecodePage(strings.NewReader(tc.in))
			if (err == nil) != tc.ok || rows != tc.rows {
				t.Errorf("DecodePage(%q) = %d, %v; want %d, ok=%v", tc.in, rows, err, tc.rows, tc.ok)
			}
		})
	}
}

func FuzzDecodePage(f *testing.F) {
	for _, s := range []string{`{"value":[]}`, `{"value":[{"Id":1}],"@odata.nextLink":"u"}`, `{"value":[{"Id":1},`, `{"value":"1"}`, `{}`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := DecodePage(strings.NewReader(s))
		if err == nil && rows < 0 {
			t.Fatalf("DecodePage(%q) = %d rows without error", s, rows)
		}
		if err == nil && strings.Count(s, "{") < rows+1 {
			t.Fatalf("DecodePage(%q) counted %d rows from fewer objects", s, rows)
		}
	})
}
