package jsonenc

import "github.com/sluicehq/sluice/odata/query"

// The encoding of response rows and the bound of its size live together:
// the 413 page-size decision adds RowOverhead and ValueBound (or, from a
// page's actual rows, NullLen, MaxNumberLen and TextBound), so a change to
// how a value is written has the bound it must keep beside it.

const (
	// NullLen is the length of a null value.
	NullLen = len("null")
	// QuoteLen is what the quotes add to a string.
	QuoteLen = len(`""`)
)

// Width bounds the encoding of a column's stored text values: the longest
// encoded value (quotes and escapes included) and the most bytes escapes
// add to one value. The store keeps one per column, updated as rows load.
type Width struct {
	JSON, Escape int64
}

// Observe widens w to cover the stored value s.
func (w *Width) Observe(s string) {
	n := int64(StringLen(s))
	if n > w.JSON {
		w.JSON = n
	}
	if e := n - int64(QuoteLen) - int64(len(s)); e > w.Escape {
		w.Escape = e
	}
}

// ValueBound bounds the encoding of any value, null included, of a field
// of kind k whose column has width w.
func ValueBound(k query.Kind, w Width) int64 {
	switch k {
	case query.KindInt, query.KindFloat:
		return MaxNumberLen
	}
	return max(int64(NullLen), w.JSON)
}

// TextBound bounds the encoding of one stored text (or JSON document) of n
// bytes in a column of width w. It is n plus a constant, so that SQL can
// compute it as octet_length + TextBound(0, w).
func TextBound(n int64, w Width) int64 { return int64(QuoteLen) + n + w.Escape }

// RowOverhead is the bytes of one row of q besides its values: braces,
// quoted field names, colons and commas, plus the comma between rows.
func RowOverhead(q *query.Query) int64 {
	n := int64(2 + 1) // {} and the comma between rows
	for _, fi := range q.Fields {
		n += int64(len(q.Collection.Fields[fi].Name)) + 4 // "name": and ,
	}
	return n
}

// PageOverhead bounds the bytes of a JSON page besides its rows, given the
// length of its head (everything before the first row) and of its next
// link: the closing bracket, the link's member and the closing brace.
func PageOverhead(headLen, linkLen int) int64 {
	return int64(len(`{"value":[],"@odata.nextLink":""}`) + headLen + linkLen)
}

// Keys returns the encoded `"Field":` prefix of every field of c, so rows
// are written without building keys per row.
func Keys(c *query.Collection) [][]byte {
	keys := make([][]byte, len(c.Fields))
	for i, f := range c.Fields {
		keys[i] = append(AppendString(nil, []byte(f.Name)), ':')
	}
	return keys
}

// AppendRow writes one row object of q: the selected fields in collection
// order, keys from Keys(q.Collection), nulls as null, numbers as
// JavaScript prints them, text as JSON strings and stored JSON documents as
// they are.
func AppendRow(b []byte, q *query.Query, keys [][]byte, vals []query.Value) []byte {
	b = append(b, '{')
	for i, fi := range q.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, keys[fi]...)
		v := &vals[i]
		if v.Null {
			b = append(b, "null"...)
			continue
		}
		k := q.Collection.Fields[fi].Kind
		switch {
		case IsNumber(k):
			b = AppendNumber(b, k, v)
		case k == query.KindJSON:
			b = append(b, v.Bytes...)
		default:
			b = AppendString(b, v.Bytes)
		}
	}
	return append(b, '}')
}

// IsNumber reports whether values of kind k are written as JSON numbers.
func IsNumber(k query.Kind) bool { return k == query.KindInt || k == query.KindFloat }

// AppendNumber appends the non-null value v of a number kind (IsNumber) as
// every response format writes it.
func AppendNumber(b []byte, k query.Kind, v *query.Value) []byte {
	if k == query.KindInt {
		return AppendInt(b, v.Int)
	}
	return AppendFloat(b, v.Float)
}

// RowPlan writes the rows of one query as AppendRow does, with what
// AppendRow looks up per field (its key, the comma before it, its kind)
// worked out once per page.
type RowPlan struct {
	cols []planCol
}

type planCol struct {
	prefix []byte // `{"Field":` for the first field, `,"Field":` after it
	kind   query.Kind
}

// NewRowPlan plans the rows of q; keys are Keys(q.Collection).
func NewRowPlan(q *query.Query, keys [][]byte) *RowPlan {
	p := &RowPlan{cols: make([]planCol, len(q.Fields))}
	for i, fi := range q.Fields {
		sep := byte(',')
		if i == 0 {
			sep = '{'
		}
		p.cols[i] = planCol{prefix: append([]byte{sep}, keys[fi]...), kind: q.Collection.Fields[fi].Kind}
	}
	return p
}

// Append writes one row object: the same bytes as AppendRow.
func (p *RowPlan) Append(b []byte, vals []query.Value) []byte {
	if len(p.cols) == 0 {
		return append(b, '{', '}')
	}
	for i := range p.cols {
		c := &p.cols[i]
		b = append(b, c.prefix...)
		v := &vals[i]
		switch {
		case v.Null:
			b = append(b, "null"...)
		case c.kind == query.KindInt:
			b = AppendInt(b, v.Int)
		case c.kind == query.KindFloat:
			b = AppendFloat(b, v.Float)
		case c.kind == query.KindJSON:
			b = append(b, v.Bytes...)
		default:
			b = AppendString(b, v.Bytes)
		}
	}
	return append(b, '}')
}
