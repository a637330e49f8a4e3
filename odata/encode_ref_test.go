package odata

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/internal/csvsafe"
	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// Every row of the demo data set, in every collection, read from each
// store, is written by the page encoders (the row plan, the CSV row) with
// the same bytes as by the reference encoders below, which look at every
// field and every byte on their own. The encoders share nothing between
// goroutines, so under the race detector (which makes the full set take
// minutes: SQLite in pure Go is many times slower under it) a fortieth of
// it is compared, 5,000 observations: every one of the 24 datasets and 50
// locations still, and every characteristic the generator draws often.
func TestEncodersMatchReferenceOnDemoData(t *testing.T) {
	if testing.Short() {
		t.Skip("generates the full demo data set twice")
	}
	rows := int64(DemoRows)
	if raceEnabled {
		rows /= 40
	}
	stores := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "demo.sqlite") }},
		{"postgres", func(t *testing.T) string { return testenv.SharedPostgres(t).CreateDatabase(t, "encoders") }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := sqlstore.Open(ctx, st.dsn(t))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			g, err := gen.New(gen.DefaultConfig(rows))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gen.Load(ctx, db, g, nil); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"Metadata", "Locations", "Observations", "Records"} {
				if n := compareCollection(t, db, query.Collections[name]); n == 0 {
					t.Errorf("%s: no rows read", name)
				}
			}
		})
	}
}

// compareCollection pages through every row of c and compares the
// encoders; it returns the rows compared.
func compareCollection(t *testing.T, db *sqlstore.DB, c *query.Collection) int {
	t.Helper()
	ctx := context.Background()
	q, err := query.Parse(c, []query.Param{{Name: "$top", Value: "10000"}})
	if err != nil {
		t.Fatal(err)
	}
	plan, keys := newRowPlan(q), fieldKeys(q)
	rows := 0
	for {
		p, err := db.Probe(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := db.Rows(ctx, q, p)
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next() {
			rows++
			vals := cur.Values()
			if got, want := plan.Append(nil, vals), refAppendRow(nil, q, keys, vals); !bytes.Equal(got, want) {
				cur.Close()
				t.Fatalf("%s row %d: JSON\n%s\nwant\n%s", c.Name, rows, got, want)
			}
			if got, want := appendCSVRow(nil, q, vals), refAppendCSVRow(nil, q, vals); !bytes.Equal(got, want) {
				cur.Close()
				t.Fatalf("%s row %d: CSV\n%q\nwant\n%q", c.Name, rows, got, want)
			}
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		cur.Close()
		if !p.More {
			return rows
		}
		q.After = p.Last
	}
}

// refAppendRow writes a row field by field, looking each field up.
func refAppendRow(b []byte, q *query.Query, keys [][]byte, vals []query.Value) []byte {
	b = append(b, '{')
	for i, fi := range q.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, keys[fi]...)
		v := &vals[i]
		k := q.Collection.Fields[fi].Kind
		switch {
		case v.Null:
			b = append(b, "null"...)
		case k == query.KindInt:
			b = jsonenc.AppendInt(b, v.Int)
		case k == query.KindFloat:
			b = jsonenc.AppendFloat(b, v.Float)
		case k == query.KindJSON:
			b = append(b, v.Bytes...)
		default:
			b = refAppendString(b, v.Bytes)
		}
	}
	return append(b, '}')
}

// refAppendString escapes a JSON string one byte (or rune) at a time.
func refAppendString(b, s []byte) []byte {
	b = append(b, '"')
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', "0123456789abcdef"[r>>4], "0123456789abcdef"[r&15])
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', "0123456789abcdef"[r&15])
		default:
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return append(b, '"')
}

// refAppendCSVRow writes an RFC 4180 record with bytes.ContainsAny.
func refAppendCSVRow(b []byte, q *query.Query, vals []query.Value) []byte {
	for i, fi := range q.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		v := &vals[i]
		k := q.Collection.Fields[fi].Kind
		switch {
		case v.Null:
		case jsonenc.IsNumber(k):
			b = jsonenc.AppendNumber(b, k, v)
		case csvsafe.Formula(v.Bytes):
			b = append(b, '"', csvsafe.Prefix)
			b = append(b, bytes.ReplaceAll(v.Bytes, []byte(`"`), []byte(`""`))...)
			b = append(b, '"')
		case len(v.Bytes) > 0 && !bytes.ContainsAny(v.Bytes, ",\"\r\n") && v.Bytes[0] != ' ' && v.Bytes[len(v.Bytes)-1] != ' ':
			b = append(b, v.Bytes...)
		default:
			b = append(b, '"')
			b = append(b, bytes.ReplaceAll(v.Bytes, []byte(`"`), []byte(`""`))...)
			b = append(b, '"')
		}
	}
	return append(b, '\r', '\n')
}
