package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

func (v *view) keyTypes() []colType {
	if v.coll.UUIDKey {
		return []colType{tText}
	}
	return []colType{tInt}
}

// Probe reads the ids of the page after q.After, plus one, to decide the
// page before any row is sent: its first and last id and whether a next page
// exists. It reads indexes only.
func (db *DB) Probe(ctx context.Context, q *query.Query) (query.Page, error) {
	v := views[q.Collection]
	sqlText, args, summary, err := probeSQL(db.d, v, q)
	if err != nil {
		return query.Page{}, err
	}
	kt := v.keyTypes()[0]
	types := []colType{kt}
	if summary {
		types = []colType{tInt, kt, kt, kt}
	}
	rs, err := db.be.query(ctx, types, sqlText, args)
	if err != nil {
		return query.Page{}, fmt.Errorf("sqlstore: probe %s: %w", q.Collection.Name, err)
	}
	defer rs.close()
	var p query.Page
	if summary {
		p, err = readSummary(rs, v, q.Top)
	} else {
		p, err = readIDs(rs, v, q.Top)
	}
	if err == nil {
		err = rs.err()
	}
	if err != nil {
		return query.Page{}, fmt.Errorf("sqlstore: probe %s: %w", q.Collection.Name, err)
	}
	return p, nil
}

func (v *view) keyOf(val query.Value) query.Key {
	if v.coll.UUIDKey {
		return query.Key{UUID: string(val.Bytes)}
	}
	return query.Key{Int: val.Int}
}

// readIDs decides the page from its ids, one row each, plus one.
func readIDs(rs rowSource, v *view, top int) (query.Page, error) {
	var p query.Page
	vals := make([]query.Value, 1)
	for rs.next() {
		if err := rs.values(vals); err != nil {
			return p, err
		}
		if p.Rows == top {
			p.More = true
			break
		}
		k := v.keyOf(vals[0])
		if p.Rows == 0 {
			p.First = k
		}
		p.Last = k
		p.Rows++
	}
	return p, nil
}

// readSummary decides the page from one row: how many of the top+1 ids
// there are, the first, the last and the top-th.
func readSummary(rs rowSource, v *view, top int) (query.Page, error) {
	var p query.Page
	if !rs.next() {
		return p, rs.err()
	}
	vals := make([]query.Value, 4)
	if err := rs.values(vals); err != nil {
		return p, err
	}
	n := int(vals[0].Int)
	p.Rows, p.More = min(n, top), n > top
	if p.Rows > 0 {
		p.First, p.Last = v.keyOf(vals[1]), v.keyOf(vals[2])
		if p.More {
			p.Last = v.keyOf(vals[3])
		}
	}
	return p, nil
}

// Rows opens a cursor over the page p decided by Probe. The first row is
// fetched before Rows returns, so a failing statement is reported before the
// caller commits to a response.
func (db *DB) Rows(ctx context.Context, q *query.Query, p query.Page) (query.Cursor, error) {
	c := &cursor{vals: make([]query.Value, len(q.Fields))}
	if p.Rows == 0 {
		return c, nil
	}
	v := views[q.Collection]
	sqlText, args, err := rowsSQL(db.d, v, q, p, false)
	if err != nil {
		return nil, err
	}
	types := make([]colType, len(q.Fields))
	for i, fi := range q.Fields {
		types[i] = v.types[fi]
	}
	rs, err := db.be.stream(ctx, types, sqlText, args)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: rows of %s: %w", q.Collection.Name, err)
	}
	c.rs = rs
	c.pending = rs.next()
	if !c.pending {
		err := rs.err()
		rs.close()
		c.rs = nil
		if err != nil {
			return nil, fmt.Errorf("sqlstore: rows of %s: %w", q.Collection.Name, err)
		}
	}
	return c, nil
}

type cursor struct {
	rs      rowSource
	vals    []query.Value
	pending bool // the first row was fetched by Rows and not yet returned
	started bool
	err     error
}

func (c *cursor) Next() bool {
	if c.rs == nil || c.err != nil {
		return false
	}
	ok := c.pending
	if c.started || !c.pending {
		ok = c.rs.next()
	}
	c.started = true
	c.pending = false
	if !ok {
		c.err = c.rs.err()
		return false
	}
	if err := c.rs.values(c.vals); err != nil {
		c.err = err
		return false
	}
	return true
}

func (c *cursor) Values() []query.Value { return c.vals }
func (c *cursor) Err() error            { return c.err }

func (c *cursor) Close() error {
	if c.rs == nil {
		return nil
	}
	err := c.rs.close()
	c.rs = nil
	return err
}

// Count returns the number of rows matching the filter of q.
func (db *DB) Count(ctx context.Context, q *query.Query) (int64, error) {
	sqlText, args, err := countSQL(db.d, views[q.Collection], q)
	if err != nil {
		return 0, err
	}
	n, err := db.queryInt(ctx, sqlText, args)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: count %s: %w", q.Collection.Name, err)
	}
	return n, nil
}

// queryInt runs a statement that returns one integer.
func (db *DB) queryInt(ctx context.Context, sqlText string, args []any) (int64, error) {
	rs, err := db.be.query(ctx, []colType{tInt}, sqlText, args)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	if !rs.next() {
		if err := rs.err(); err != nil {
			return 0, err
		}
		return 0, errors.New("no row")
	}
	vals := make([]query.Value, 1)
	if err := rs.values(vals); err != nil {
		return 0, err
	}
	return vals[0].Int, rs.err()
}

// columnStats returns the size bounds of every column, read from the store
// at most every statsTTL.
func (db *DB) columnStats(ctx context.Context) (map[string]jsonenc.Width, error) {
	db.statsMu.Lock()
	defer db.statsMu.Unlock()
	if db.stats != nil && db.now().Sub(db.statsRead) < statsTTL {
		return db.stats, nil
	}
	rs, err := db.be.query(ctx, []colType{tText, tText, tInt, tInt}, "SELECT tbl, col, max_json, max_escape FROM column_stats", nil)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: column stats: %w", err)
	}
	defer rs.close()
	out := map[string]jsonenc.Width{}
	vals := make([]query.Value, 4)
	for rs.next() {
		if err := rs.values(vals); err != nil {
			return nil, err
		}
		out[string(vals[0].Bytes)+"."+string(vals[1].Bytes)] = jsonenc.Width{JSON: vals[2].Int, Escape: vals[3].Int}
	}
	if err := rs.err(); err != nil {
		return nil, fmt.Errorf("sqlstore: column stats: %w", err)
	}
	db.stats, db.statsRead = out, db.now()
	return out, nil
}

// ValueBytesBound is an upper bound of the JSON size of the selected values
// of rows rows of q (values only, without field names), from the longest
// value ever stored in each column. It costs no database work beyond
// reading the bounds every few seconds.
func (db *DB) ValueBytesBound(ctx context.Context, q *query.Query, rows int) (int64, error) {
	stats, err := db.columnStats(ctx)
	if err != nil {
		return 0, err
	}
	v := views[q.Collection]
	var per int64
	for _, fi := range q.Fields {
		per += jsonenc.ValueBound(q.Collection.Fields[fi].Kind, stats[v.stats[fi]])
	}
	return per * int64(rows), nil
}

// ExactValueBytes bounds the JSON size of the selected values of page p
// from the actual rows: text by its length plus the column's worst escape
// overhead, integers by their digits, floats by the longest number. It
// reads the page's rows, so it is meant for pages whose cheap bound is
// over a limit.
func (db *DB) ExactValueBytes(ctx context.Context, q *query.Query, p query.Page) (int64, error) {
	if p.Rows == 0 {
		return 0, nil
	}
	stats, err := db.columnStats(ctx)
	if err != nil {
		return 0, err
	}
	v := views[q.Collection]
	inner, args, err := rowsSQL(db.d, v, q, p, true)
	if err != nil {
		return 0, err
	}
	b := &builder{d: db.d}
	b.s("SELECT CAST(COALESCE(SUM(0")
	for i, fi := range q.Fields {
		c := "r.c" + strconv.Itoa(i)
		// The SQL form of the bounds of package jsonenc: a number's
		// digits, MaxNumberLen, TextBound.
		b.s(" + CASE WHEN ", c, " IS NULL THEN ", strconv.Itoa(jsonenc.NullLen), " ELSE ")
		switch q.Collection.Fields[fi].Kind {
		case query.KindInt:
			b.s("length(CAST(", c, " AS TEXT))")
		case query.KindFloat:
			b.s(strconv.Itoa(jsonenc.MaxNumberLen))
		default:
			b.s(db.d.octetLength(c), " + ", strconv.FormatInt(jsonenc.TextBound(0, stats[v.stats[fi]]), 10))
		}
		b.s(" END")
	}
	b.s("), 0) AS BIGINT) FROM (", inner, ") r")
	n, err := db.queryInt(ctx, b.String(), args)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: page size of %s: %w", q.Collection.Name, err)
	}
	return n, nil
}

// Empty reports whether the store holds no observation.
func (db *DB) Empty(ctx context.Context) (bool, error) {
	rs, err := db.be.query(ctx, []colType{tInt}, "SELECT id FROM observations LIMIT 1", nil)
	if err != nil {
		return false, fmt.Errorf("sqlstore: %w", err)
	}
	defer rs.close()
	has := rs.next()
	return !has, rs.err()
}
