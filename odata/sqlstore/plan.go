package sqlstore

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/odata/query"
)

// builder accumulates one SQL statement and its bind arguments.
type builder struct {
	d    dialect
	b    []byte
	args []any
}

func (b *builder) s(parts ...string) *builder {
	for _, p := range parts {
		b.b = append(b.b, p...)
	}
	return b
}

// arg binds v and writes its placeholder: values never become SQL text.
func (b *builder) arg(v any) *builder {
	b.args = append(b.args, v)
	b.b = b.d.appendPlaceholder(b.b, len(b.args))
	return b
}

func (b *builder) String() string { return string(b.b) }

// scope says, for the statement being built, which tables are in scope and
// which alias serves each level of a filter field.
type scope struct {
	coll  *query.Collection
	depth query.Level // innermost table in scope
}

// column returns the SQL column of a filter field in this scope (see
// columnIn).
func (sc scope) column(field string) string {
	return columnIn(sc.coll, sc.depth, fieldRow(sc.coll, field))
}

// needsLocationJoin reports whether a /Metadata filter evaluated over
// observations also needs the location row (for fields not copied onto
// observations).
func needsLocationJoin(c *query.Collection, e query.Expr) bool {
	found := false
	query.Fields(e, func(name string) {
		f := fieldRow(c, name)
		if _, onObs := f.ObsColumn(); f.Level == query.LevelLocation && !onObs {
			found = true
		}
	})
	return found
}

// depthOf is the deepest level a filter reaches for a collection.
func depthOf(c *query.Collection, e query.Expr) query.Level {
	d := c.Level
	query.Fields(e, func(name string) {
		if l := fieldRow(c, name).Level; l > d {
			d = l
		}
	})
	return d
}

var sqlOps = map[query.Op]string{
	query.OpEq: " = ", query.OpNe: " <> ", query.OpLt: " < ", query.OpGt: " > ", query.OpLe: " <= ", query.OpGe: " >= ",
}

// nullable reports whether a filter column may hold NULL, which changes
// what ne means (a missing region is "not that region").
func nullableColumn(col string) bool {
	return strings.Contains(col, "region_")
}

// expr writes a filter as a boolean SQL expression.
func (b *builder) expr(sc scope, e query.Expr) error {
	switch e := e.(type) {
	case *query.And:
		return b.list(sc, e.Args, " AND ")
	case *query.Or:
		return b.list(sc, e.Args, " OR ")
	case *query.Compare:
		col := sc.column(e.Field)
		if e.Value.Type == query.LitRegion {
			b.regionCompare(col, e.Op, e.Value.Text)
			return nil
		}
		b.compare(col, e.Op, e.Value.Value())
		return nil
	case *query.In:
		col := sc.column(e.Field)
		if len(e.Values) > 0 && e.Values[0].Type == query.LitRegion {
			b.s("(")
			for i, v := range e.Values {
				if i > 0 {
					b.s(" OR ")
				}
				b.regionCompare(col, query.OpEq, v.Text)
			}
			b.s(")")
			return nil
		}
		b.s(col, " IN (")
		for i, v := range e.Values {
			if i > 0 {
				b.s(", ")
			}
			b.arg(v.Value())
		}
		b.s(")")
		return nil
	case *query.Match:
		b.match(sc.column(e.Field), e.Func, e.Value.Text)
		return nil
	}
	return fmt.Errorf("sqlstore: unknown filter node %T", e)
}

func (b *builder) list(sc scope, args []query.Expr, sep string) error {
	b.s("(")
	for i, a := range args {
		if i > 0 {
			b.s(sep)
		}
		if err := b.expr(sc, a); err != nil {
			return err
		}
	}
	b.s(")")
	return nil
}

func (b *builder) compare(col string, op query.Op, v any) {
	if op == query.OpNe && nullableColumn(col) {
		b.s("(", col, " IS NULL OR ", col, " <> ").arg(v).s(")")
		return
	}
	b.s(col, sqlOps[op]).arg(v)
}

// regionCompare compares a RegionId: the literal's form picks the column
// (country, province or hub); a form no location can have matches nothing.
func (b *builder) regionCompare(prefix string, op query.Op, region string) {
	col := regionColumn(region)
	if col == "" {
		if op == query.OpEq {
			b.s("1 = 0")
		} else {
			b.s("1 = 1")
		}
		return
	}
	b.compare(prefix+col, op, region)
}

// match writes endswith/startswith/contains without LIKE, whose wildcards
// and case rules differ between the stores.
func (b *builder) match(col string, fn query.Func, lit string) {
	if lit == "" {
		b.s("1 = 1")
		return
	}
	n := int64(utf8.RuneCountInString(lit))
	switch fn {
	case query.FuncEndsWith:
		if b.d.pg {
			b.s("right(", col, ", ").arg(n).s(") = ").arg(lit)
		} else {
			b.s("substr(", col, ", -").arg(n).s(") = ").arg(lit)
		}
	case query.FuncStartsWith:
		if b.d.pg {
			b.s("left(", col, ", ").arg(n).s(") = ").arg(lit)
		} else {
			b.s("substr(", col, ", 1, ").arg(n).s(") = ").arg(lit)
		}
	default:
		if b.d.pg {
			b.s("strpos(", col, ", ").arg(lit).s(") > 0")
		} else {
			b.s("instr(", col, ", ").arg(lit).s(") > 0")
		}
	}
}

// where writes the filter of a query as a condition on the view's base row,
// wrapping it in EXISTS over deeper tables when it names their fields: a
// location or dataset matches when one of its observations (or locations),
// together with it, satisfies the whole filter.
func (b *builder) where(v *view, f query.Expr) error {
	if f == nil {
		b.s("1 = 1")
		return nil
	}
	base := v.coll.Level
	depth := depthOf(v.coll, f)
	sc := scope{coll: v.coll, depth: depth}
	if depth == base {
		return b.expr(sc, f)
	}
	switch {
	case v.coll == query.Locations:
		b.s("EXISTS (SELECT 1 FROM observations o WHERE o.location_id = l.id AND ")
	case depth == query.LevelLocation:
		b.s("EXISTS (SELECT 1 FROM locations l WHERE l.doi = d.doi AND ")
	case needsLocationJoin(v.coll, f):
		b.s("EXISTS (SELECT 1 FROM observations o JOIN locations l ON l.id = o.location_id WHERE o.doi = d.doi AND ")
	default:
		b.s("EXISTS (SELECT 1 FROM observations o WHERE o.doi = d.doi AND ")
	}
	if err := b.expr(sc, f); err != nil {
		return err
	}
	b.s(")")
	return nil
}

// maxBranches bounds the union a filter is split into; beyond it the filter
// is left to the database planner as one condition.
const maxBranches = 16

// branches splits an observation filter into disjunctive normal form, with
// `in` lists as one branch per value, so that each branch is a conjunction a
// single (column, id) index can serve in id order. It returns nil when the
// filter is a single conjunction or the split would exceed maxBranches.
func branches(f query.Expr) [][]query.Expr {
	out, ok := dnf(f)
	if !ok || len(out) <= 1 || len(out) > maxBranches {
		return nil
	}
	return out
}

func dnf(e query.Expr) ([][]query.Expr, bool) {
	switch e := e.(type) {
	case *query.Or:
		var out [][]query.Expr
		for _, a := range e.Args {
			sub, ok := dnf(a)
			if !ok {
				return nil, false
			}
			out = append(out, sub...)
			if len(out) > maxBranches {
				return nil, false
			}
		}
		return out, true
	case *query.And:
		out := [][]query.Expr{nil}
		for _, a := range e.Args {
			sub, ok := dnf(a)
			if !ok {
				return nil, false
			}
			if len(out)*len(sub) > maxBranches {
				return nil, false
			}
			var next [][]query.Expr
			for _, left := range out {
				for _, right := range sub {
					conj := append(append([]query.Expr(nil), left...), right...)
					next = append(next, conj)
				}
			}
			out = next
		}
		return out, true
	case *query.In:
		if len(e.Values) > maxBranches {
			return nil, false
		}
		out := make([][]query.Expr, 0, len(e.Values))
		for _, v := range e.Values {
			out = append(out, []query.Expr{&query.Compare{Field: e.Field, Op: query.OpEq, Value: v}})
		}
		return out, true
	}
	return [][]query.Expr{{e}}, true
}

func conj(c []query.Expr) query.Expr {
	if len(c) == 1 {
		return c[0]
	}
	return &query.And{Args: c}
}

// branchWhere writes branch i of a split filter, excluding the rows of the
// earlier branches so that the union has no duplicates (COALESCE makes an
// unknown earlier condition count as false).
func (b *builder) branchWhere(sc scope, bs [][]query.Expr, i int) error {
	if err := b.expr(sc, conj(bs[i])); err != nil {
		return err
	}
	for j := 0; j < i; j++ {
		b.s(" AND NOT COALESCE(")
		if err := b.expr(sc, conj(bs[j])); err != nil {
			return err
		}
		b.s(", FALSE)")
	}
	return nil
}

func (v *view) keyArg(k query.Key) any {
	if v.coll.UUIDKey {
		return k.UUID
	}
	return k.Int
}

// probeSQL selects the ids of the page plus one row: enough to know the
// page's bounds and whether another page follows. Only indexes are read.
// On PostgreSQL a plain range (no split filter) is summed up in one row
// (summary true; readSummary reads it) instead of sending every id.
func probeSQL(d dialect, v *view, q *query.Query) (sqlText string, args []any, summary bool, err error) {
	b := &builder{d: d}
	key := v.key()
	limit := int64(q.Top) + 1
	if v.table == "observations" && q.Filter != nil {
		if bs := branches(q.Filter); bs != nil {
			// One arm per branch, merged in id order, so that each arm reads
			// only the rows the page takes from it, plus one. The databases
			// need different shapes to merge lazily: PostgreSQL plans a
			// Merge Append over arms that are ordered, limited subqueries
			// (flat arms get an Append and a Sort of every match); SQLite's
			// compound merge wants flat arms (a limited subquery is
			// materialised and sorted).
			//
			// On PostgreSQL the arms carry no exclusion of the earlier
			// branches and UNION removes the duplicates instead: each arm is
			// limited, so deduplicating costs at most arms × (top+1) ids,
			// while an exclusion would need the heap and tempt the planner
			// into a primary-key scan with a filter for a common value.
			sc := scope{coll: v.coll, depth: query.LevelObservation}
			for i := range bs {
				switch {
				case i > 0 && d.pg:
					b.s(" UNION ")
				case i > 0:
					b.s(" UNION ALL ")
				}
				if d.pg {
					b.s("SELECT id FROM (")
				}
				b.s("SELECT o.id AS id FROM observations o WHERE ")
				var err error
				if d.pg {
					err = b.expr(sc, conj(bs[i]))
				} else {
					err = b.branchWhere(sc, bs, i)
				}
				if err != nil {
					return "", nil, false, err
				}
				b.s(" AND o.id > ").arg(v.keyArg(q.After))
				if d.pg {
					b.s(" ORDER BY o.id LIMIT ").arg(limit).s(fmt.Sprintf(") b%d", i))
				}
			}
			b.s(" ORDER BY id LIMIT ").arg(limit)
			return b.String(), b.args, false, nil
		}
	}
	if d.pg {
		// count, first, last of the top+1 ids and the top-th. array_agg
		// takes the ids in the order the limited subquery yields them,
		// which is the index's: the Limit node sits between the ordered
		// scan and the aggregate, so nothing can reorder them.
		b.s("SELECT count(*), min(k), max(k), (array_agg(k))[").arg(int64(q.Top)).s("] FROM (SELECT ", key, " AS k")
	} else {
		b.s("SELECT ", key)
	}
	b.s(" FROM ", v.table, " ", v.alias, " WHERE ")
	if err := b.where(v, q.Filter); err != nil {
		return "", nil, false, err
	}
	b.s(" AND ", key, " > ").arg(v.keyArg(q.After)).s(" ORDER BY ", key, " LIMIT ").arg(limit)
	if d.pg {
		b.s(") s")
	}
	return b.String(), b.args, d.pg, nil
}

// rowsSQL selects the selected fields of the rows between the page's first
// and last id, with the same filter, in id order. aliased names the columns
// c0, c1, ... for a statement that wraps this one.
func rowsSQL(d dialect, v *view, q *query.Query, p query.Page, aliased bool) (string, []any, error) {
	b := &builder{d: d}
	key := v.key()
	b.s("SELECT ")
	for i, fi := range q.Fields {
		if i > 0 {
			b.s(", ")
		}
		b.s(v.exprs[fi])
		if aliased {
			b.s(" AS c", strconv.Itoa(i))
		}
	}
	if v.table == "observations" && q.Filter != nil {
		if bs := branches(q.Filter); bs != nil {
			// The union yields the matching ids of the range, one index
			// range per branch; the row and its joins are read by id.
			b.s(" FROM (")
			sc := scope{coll: v.coll, depth: query.LevelObservation}
			for i := range bs {
				if i > 0 {
					b.s(" UNION ALL ")
				}
				b.s("SELECT o.id AS id FROM observations o WHERE ")
				if err := b.branchWhere(sc, bs, i); err != nil {
					return "", nil, err
				}
				b.s(" AND o.id >= ").arg(p.First.Int).s(" AND o.id <= ").arg(p.Last.Int)
			}
			b.s(") m JOIN observations o ON o.id = m.id", v.joins, " ORDER BY o.id")
			b.streamingLimit(v, p)
			return b.String(), b.args, nil
		}
	}
	b.s(" FROM ", v.table, " ", v.alias, v.joins, " WHERE ")
	if err := b.where(v, q.Filter); err != nil {
		return "", nil, err
	}
	b.s(" AND ", key, " >= ").arg(v.keyArg(p.First)).s(" AND ", key, " <= ").arg(v.keyArg(p.Last)).s(" ORDER BY ", key)
	b.streamingLimit(v, p)
	return b.String(), b.args, nil
}

// streamingLimit bounds a joined page by the number of ids in its range,
// which never cuts a row. It is there for PostgreSQL's generic plan of the
// prepared statement: without a LIMIT that plan hash-joins the page and
// sorts it (on disk at 10,000 rows), so no row leaves before the last is
// read; with one it walks the id index and joins row by row, streaming.
func (b *builder) streamingLimit(v *view, p query.Page) {
	if v.joins == "" || v.coll.UUIDKey {
		return
	}
	b.s(" LIMIT ").arg(p.Last.Int - p.First.Int + 1)
}

// countSQL counts the rows matching the filter.
func countSQL(d dialect, v *view, q *query.Query) (string, []any, error) {
	b := &builder{d: d}
	b.s("SELECT count(*) FROM ", v.table, " ", v.alias, " WHERE ")
	if err := b.where(v, q.Filter); err != nil {
		return "", nil, err
	}
	return b.String(), b.args, nil
}
