package odata

import (
	"testing"

	"github.com/sluicehq/sluice/odata/query"
)

// CSV export neutralises cells a spreadsheet would run as formulas
// (OWASP: a leading single quote, the cell quoted) and leaves numbers,
// also numbers held as text, byte-identical.
func TestCSVFormulaCells(t *testing.T) {
	q, err := query.Parse(query.Records, []query.Param{{Name: "$select", Value: "ResultComment,ResultValue"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		comment string
		value   float64
		want    string
	}{
		{`=HYPERLINK("http://evil.example","x")`, 1, `1,"'=HYPERLINK(""http://evil.example"",""x"")"` + "\r\n"},
		{"+1+1", -0.25, `-0.25,"'+1+1"` + "\r\n"},
		{"-1+1", 2, `2,"'-1+1"` + "\r\n"},
		{"@SUM(A1)", 2, `2,"'@SUM(A1)"` + "\r\n"},
		{"\tcmd", 2, "2,\"'\tcmd\"\r\n"},
		{"\r=1", 2, "2,\"'\r=1\"\r\n"},
		{"-0.25", -0.25, "-0.25,-0.25\r\n"},
		{"+3", 3, "3,+3\r\n"},
		{"a=b", 3, "3,a=b\r\n"},
	} {
		// Columns come in field order: ResultValue, then ResultComment.
		if q.Collection.Fields[q.Fields[0]].Name != "ResultValue" {
			t.Fatalf("field order %v", q.Fields)
		}
		vals := []query.Value{{Float: tc.value}, {Bytes: []byte(tc.comment)}}
		if got := string(appendCSVRow(nil, q, vals)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.comment, got, tc.want)
		}
	}
}
