package odata

import (
	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

func appendJSONString(b []byte, s string) []byte { return jsonenc.AppendString(b, []byte(s)) }

// keysOf holds, per collection, the encoded `"Field":` prefix of every
// field, so rows are written without building keys per row.
var keysOf = func() map[*query.Collection][][]byte {
	out := map[*query.Collection][][]byte{}
	for _, c := range query.Collections {
		keys := make([][]byte, len(c.Fields))
		for i, f := range c.Fields {
			keys[i] = append(jsonenc.AppendString(nil, []byte(f.Name)), ':')
		}
		out[c] = keys
	}
	return out
}()

func fieldKeys(q *query.Query) [][]byte { return keysOf[q.Collection] }

// appendRow writes one row object: the selected fields in collection order,
// nulls as null, numbers as JavaScript prints them, text as JSON strings and
// stored JSON documents as they are.
func appendRow(b []byte, q *query.Query, keys [][]byte, vals []query.Value) []byte {
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
		switch q.Collection.Fields[fi].Kind {
		case query.KindInt:
			b = jsonenc.AppendInt(b, v.Int)
		case query.KindFloat:
			b = jsonenc.AppendFloat(b, v.Float)
		case query.KindJSON:
			b = append(b, v.Bytes...)
		default:
			b = jsonenc.AppendString(b, v.Bytes)
		}
	}
	return append(b, '}')
}
