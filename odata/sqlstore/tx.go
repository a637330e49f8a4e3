package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// loadTx is a write transaction: migrations and loads.
type loadTx interface {
	exec(ctx context.Context, sql string, args ...any) error
	queryInt(ctx context.Context, sql string, args ...any) (int64, error)
	// prepareLoad takes the locks and settings a load needs.
	prepareLoad(ctx context.Context) error
	// startBulk prepares loading into the empty observations table.
	startBulk(ctx context.Context) error
	copyObservations(ctx context.Context, src *obsSource) (int64, error)
	commit(ctx context.Context) error
	// rollback ends the transaction unless it was committed; it is
	// deferred, so it uses its own short deadline.
	rollback()
}

var obsColumnList = func() string {
	names := make([]string, len(observationsTable.cols))
	for i, c := range observationsTable.cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}()

// --- PostgreSQL --------------------------------------------------------------

type pgTx struct {
	tx     pgx.Tx
	freeze bool // COPY ... WITH (FREEZE): the table was truncated in this transaction
}

func (b *pgBackend) begin(ctx context.Context) (loadTx, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if b.cfg.StatementTimeout > 0 {
		// Loads and migrations are not reads: index builds take minutes.
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
	}
	return &pgTx{tx: tx}, nil
}

func (t *pgTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t *pgTx) queryInt(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := t.tx.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

func (t *pgTx) prepareLoad(ctx context.Context) error {
	for _, s := range []string{
		// The commit must be on disk before the VACUUM that follows:
		// VACUUM cannot set hint bits for an unflushed commit, and without
		// them no page becomes all-visible, so the probes' index-only
		// scans would fetch heap pages. (Servers may run with
		// synchronous_commit off.)
		"SET LOCAL synchronous_commit = on",
		"SET LOCAL maintenance_work_mem = '1GB'", // in-memory sorts for the index builds
		// Readers go on; a second load waits, so ids stay increasing.
		"LOCK TABLE datasets, locations, location_regions, observations IN SHARE ROW EXCLUSIVE MODE",
	} {
		if err := t.exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// startBulk truncates the (empty) table so that COPY may FREEZE: rows are
// written frozen and their pages marked all-visible, so the probes'
// index-only scans need no heap page from the first query on, whatever a
// later VACUUM manages (it cannot mark pages whose commit it cannot yet
// hint). TRUNCATE makes readers of observations wait for this load's
// commit; the table is empty, so they would have found nothing anyway.
func (t *pgTx) startBulk(ctx context.Context) error {
	if err := t.exec(ctx, "TRUNCATE observations"); err != nil {
		return err
	}
	t.freeze = true
	return nil
}

func (t *pgTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t *pgTx) rollback() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.tx.Rollback(ctx) // after a commit this is a no-op
}

// copyObservations streams rows with COPY ... FROM STDIN in text format:
// the reader encodes rows straight from the source into the copy buffer,
// so nothing per row is allocated and the source runs at COPY's pace.
func (t *pgTx) copyObservations(ctx context.Context, src *obsSource) (int64, error) {
	r := &copyReader{src: src, buf: make([]byte, 0, 128<<10)}
	stmt := "COPY observations (" + obsColumnList + ") FROM STDIN"
	if t.freeze {
		stmt += " WITH (FREEZE)"
	}
	tag, err := t.tx.Conn().PgConn().CopyFrom(ctx, r, stmt)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

type copyReader struct {
	src  *obsSource
	buf  []byte
	off  int
	done bool
}

func (r *copyReader) Read(p []byte) (int, error) {
	for r.off >= len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for len(r.buf) < 64<<10 {
			if !r.src.advance() {
				r.done = true
				if r.src.err != nil {
					return 0, r.src.err
				}
				break
			}
			r.buf = appendCopyRow(r.buf, &r.src.row)
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

func appendCopyRow(b []byte, row *obsRow) []byte {
	b = strconv.AppendInt(b, row.id, 10)
	b = append(b, '\t')
	b = appendCopyText(b, row.doi)
	b = append(b, '\t')
	b = strconv.AppendInt(b, row.locationID, 10)
	b = append(b, '\t')
	b = appendCopyText(b, row.loc.typ)
	for _, r := range row.loc.regions {
		b = append(b, '\t')
		b = appendCopyCell(b, r, tText)
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, row.year, 10)
	b = append(b, '\t')
	b = appendCopyText(b, row.group)
	for i := range row.tail {
		b = append(b, '\t')
		b = appendCopyCell(b, row.tail[i], tailTypes[i])
	}
	return append(b, '\n')
}

func appendCopyCell(b []byte, c Cell, t colType) []byte {
	if !c.Valid {
		return append(b, '\\', 'N')
	}
	if t == tFloat {
		return strconv.AppendFloat(b, c.F, 'g', -1, 64)
	}
	return appendCopyText(b, c.S)
}

func appendCopyText(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var esc byte
		switch s[i] {
		case '\\':
			esc = '\\'
		case '\t':
			esc = 't'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\', esc)
		start = i + 1
	}
	return append(b, s[start:]...)
}

// --- SQLite -------------------------------------------------------------------

type sqliteTx struct {
	tx *sql.Tx
	d  dialect
}

func (b *sqliteBackend) begin(ctx context.Context) (loadTx, error) {
	tx, err := b.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see the DSN)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{tx: tx, d: sqliteDialect}, nil
}

func (t *sqliteTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, sql, args...)
	return err
}

func (t *sqliteTx) queryInt(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := t.tx.QueryRowContext(ctx, sql, args...).Scan(&n)
	return n, err
}

func (t *sqliteTx) prepareLoad(context.Context) error { return nil }
func (t *sqliteTx) startBulk(context.Context) error   { return nil }
func (t *sqliteTx) commit(context.Context) error      { return t.tx.Commit() }
func (t *sqliteTx) rollback()                         { _ = t.tx.Rollback() }

// copyObservations inserts row by row through one prepared statement. The
// driver binds parameters in time quadratic in their number, so multi-row
// INSERTs are slower than this.
func (t *sqliteTx) copyObservations(ctx context.Context, src *obsSource) (int64, error) {
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(observationsTable.cols)), ", ")
	stmt, err := t.tx.PrepareContext(ctx, "INSERT INTO observations ("+obsColumnList+") VALUES ("+marks+")")
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	args := make([]any, 0, len(observationsTable.cols))
	var total int64
	for src.advance() {
		r := &src.row
		args = append(args[:0], r.id, r.doi, r.locationID, r.loc.typ)
		for _, c := range r.loc.regions {
			args = append(args, cellArg(c, tText))
		}
		args = append(args, r.year, r.group)
		for i := range r.tail {
			args = append(args, cellArg(r.tail[i], tailTypes[i]))
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return total, fmt.Errorf("insert observation %d: %w", r.id, err)
		}
		total++
	}
	return total, src.err
}
