package sqlstore

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/odata/query"
)

// Explain returns the plan of the probe statement of q, one line per node.
func (db *DB) Explain(ctx context.Context, q *query.Query) ([]string, error) {
	sqlText, args, _, err := probeSQL(db.d, views[q.Collection], q)
	if err != nil {
		return nil, err
	}
	prefix := "EXPLAIN QUERY PLAN "
	if db.d.pg {
		prefix = "EXPLAIN (COSTS OFF) "
	}
	types := []colType{tText}
	if !db.d.pg {
		types = []colType{tInt, tInt, tInt, tText} // id, parent, notused, detail
	}
	rs, err := db.be.query(ctx, types, prefix+sqlText, args)
	if err != nil {
		return nil, err
	}
	defer rs.close()
	var out []string
	vals := make([]query.Value, len(types))
	for rs.next() {
		if err := rs.values(vals); err != nil {
			return nil, err
		}
		out = append(out, strings.TrimSpace(string(vals[len(vals)-1].Bytes)))
	}
	return out, rs.err()
}

// Branches exposes the DNF split for tests.
func Branches(f query.Expr) [][]query.Expr { return branches(f) }

// SchemaVersion is the version migrate brings a store to.
const SchemaVersion = schemaVersion

// Exec runs a statement, for tests that need to change a store behind its back.
func (db *DB) Exec(ctx context.Context, sql string) error { return db.be.exec(ctx, sql) }

// ReadText runs a read statement that returns one text value, as the
// store's reads do (stream: as a row stream).
func (db *DB) ReadText(ctx context.Context, sqlText string, stream bool) (string, error) {
	read := db.be.query
	if stream {
		read = db.be.stream
	}
	rs, err := read(ctx, []colType{tText}, sqlText, nil)
	if err != nil {
		return "", err
	}
	defer rs.close()
	vals := make([]query.Value, 1)
	if !rs.next() {
		return "", rs.err()
	}
	if err := rs.values(vals); err != nil {
		return "", err
	}
	return string(vals[0].Bytes), rs.err()
}
