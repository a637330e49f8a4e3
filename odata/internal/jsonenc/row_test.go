package jsonenc

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"testing/quick"

	"github.com/sluicehq/sluice/odata/query"
)

// randomRow builds a query over a random selection of fields of a random
// collection, and one row of values for it: nulls, extreme numbers, text
// with every kind of escape and invalid UTF-8.
func randomRow(r *rand.Rand) (*query.Query, []query.Value) {
	names := []string{"Metadata", "Locations", "Observations", "Records"}
	c := query.Collections[names[r.IntN(len(names))]]
	q := &query.Query{Collection: c}
	for i := range c.Fields {
		if r.IntN(3) > 0 {
			q.Fields = append(q.Fields, i)
		}
	}
	sort.Ints(q.Fields)
	vals := make([]query.Value, len(q.Fields))
	pieces := []string{"a", "é", "\"", "\\", "\n", "\x01", "\u2028", "\xff", "水", " ", "\t"}
	floats := []float64{0, -0.25, 1e-7, 1.5e-300, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e21, 123456789012345680000, math.NaN(), math.Inf(-1)}
	for i, fi := range q.Fields {
		v := &vals[i]
		if c.Fields[fi].Nullable && r.IntN(4) == 0 {
			v.Null = true
			continue
		}
		switch c.Fields[fi].Kind {
		case query.KindInt:
			v.Int = []int64{0, -1, math.MinInt64, math.MaxInt64, r.Int64()}[r.IntN(5)]
		case query.KindFloat:
			if r.IntN(2) == 0 {
				v.Float = floats[r.IntN(len(floats))]
			} else {
				v.Float = math.Float64frombits(r.Uint64())
			}
		default:
			var b []byte
			for n := r.IntN(12); n > 0; n-- {
				b = append(b, pieces[r.IntN(len(pieces))]...)
			}
			v.Bytes = b
		}
	}
	return q, vals
}

// TestRowBound is the property the 413 decision relies on: a row, with the
// comma that follows it, is never longer than RowOverhead plus the bound
// of its values, both the cheap bound from column widths (ValueBound) and
// the one from the row's actual values (NullLen, a number's digits,
// MaxNumberLen, TextBound) that sqlstore computes in SQL.
func TestRowBound(t *testing.T) {
	property := func(seed1, seed2 uint64) bool {
		q, vals := randomRow(rand.New(rand.NewPCG(seed1, seed2)))
		keys := Keys(q.Collection)
		got := int64(len(AppendRow(nil, q, keys, vals)) + 1)
		cheap, exact := RowOverhead(q), RowOverhead(q)
		for i, fi := range q.Fields {
			k, v := q.Collection.Fields[fi].Kind, vals[i]
			var w Width // the column's width after loading this value
			if !v.Null && !IsNumber(k) {
				w.Observe(string(v.Bytes))
			}
			cheap += ValueBound(k, w)
			switch {
			case v.Null:
				exact += int64(NullLen)
			case k == query.KindInt:
				exact += int64(len(strconv.FormatInt(v.Int, 10))) // SQL: length(CAST(c AS TEXT))
			case k == query.KindFloat:
				exact += MaxNumberLen
			default:
				exact += TextBound(int64(len(v.Bytes)), w)
			}
		}
		if got > cheap || got > exact {
			t.Logf("row %s: %d bytes, bounds %d (widths) and %d (values)", AppendRow(nil, q, keys, vals), got, cheap, exact)
			return false
		}
		return true
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestPageOverhead checks the frame of a page around its rows.
func TestPageOverhead(t *testing.T) {
	head, link := `{"value":[`, "http://h/v1/odata/v4/Records?$skiptoken=Id:5"
	page := head + `]` + `,"@odata.nextLink":` + string(AppendString(nil, []byte(link))) + `}`
	if got := PageOverhead(len(head), len(link)); int64(len(page)) > got {
		t.Errorf("page frame %q is %d bytes, PageOverhead %d", page, len(page), got)
	}
}
