package odata

import (
	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

func appendJSONString(b []byte, s string) []byte { return jsonenc.AppendString(b, []byte(s)) }

// keysOf holds, per collection, the encoded `"Field":` prefix of every
// field.
var keysOf = func() map[*query.Collection][][]byte {
	out := map[*query.Collection][][]byte{}
	for _, c := range query.Collections {
		out[c] = jsonenc.Keys(c)
	}
	return out
}()

func fieldKeys(q *query.Query) [][]byte { return keysOf[q.Collection] }

// appendRow writes one row object (jsonenc.AppendRow, whose size bound
// decides 413).
func appendRow(b []byte, q *query.Query, keys [][]byte, vals []query.Value) []byte {
	return jsonenc.AppendRow(b, q, keys, vals)
}

// newRowPlan plans the JSON rows of a page (jsonenc.RowPlan: the bytes of
// appendRow, with the per-field lookups done once).
func newRowPlan(q *query.Query) *jsonenc.RowPlan { return jsonenc.NewRowPlan(q, fieldKeys(q)) }
