package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/odata/query"
)

// CopyRows runs `COPY (<the statement Rows runs for page p>) TO STDOUT` on
// PostgreSQL and writes the text output to w. It exists to measure the API
// against the database's own fastest way out. COPY takes no bind
// parameters, so it only accepts pages whose statement has integer
// arguments (no $filter): those are inlined as numbers, and no text from a
// request is ever spliced into SQL.
func (db *DB) CopyRows(ctx context.Context, q *query.Query, p query.Page, w io.Writer) (int64, error) {
	pg, ok := db.be.(*pgBackend)
	if !ok {
		return 0, errors.New("sqlstore: CopyRows needs PostgreSQL")
	}
	sqlText, args, err := rowsSQL(db.d, views[q.Collection], q, p, false)
	if err != nil {
		return 0, err
	}
	// Replace $10 before $1.
	for i := len(args); i >= 1; i-- {
		n, ok := args[i-1].(int64)
		if !ok {
			return 0, fmt.Errorf("sqlstore: CopyRows inlines integers only, argument %d is %T", i, args[i-1])
		}
		sqlText = strings.ReplaceAll(sqlText, "$"+strconv.Itoa(i), strconv.FormatInt(n, 10))
	}
	conn, err := pg.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	tag, err := conn.Conn().PgConn().CopyTo(ctx, w, "COPY ("+sqlText+") TO STDOUT")
	if err != nil {
		return 0, fmt.Errorf("sqlstore: copy: %w", err)
	}
	return tag.RowsAffected(), nil
}
