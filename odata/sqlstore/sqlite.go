package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"

	_ "modernc.org/sqlite" // the embedded store's driver

	"github.com/sluicehq/sluice/odata/query"
)

// sqliteBackend is an embedded SQLite file through modernc.org/sqlite, the
// zero-setup store.
type sqliteBackend struct{ db *sql.DB }

func openSQLite(ctx context.Context, path string, readOnly bool) (*sqliteBackend, error) {
	if path == "" {
		return nil, errors.New("sqlstore: empty SQLite path")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlstore: SQLite path %q may not contain '?' or '#'", path)
	}
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(30000)"
	if readOnly {
		// mode=ro never creates the file; setting the journal mode
		// would write.
		dsn += "&mode=ro"
	} else {
		dsn += "&_pragma=journal_mode(WAL)"
	}
	dsn +=
		"&_pragma=synchronous(NORMAL)" +
			"&_pragma=cache_size(-65536)" +
			"&_pragma=temp_store(MEMORY)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open SQLite %s: %w", path, err)
	}
	db.SetMaxOpenConns(max(8, 2*runtime.GOMAXPROCS(0)))
	db.SetMaxIdleConns(max(8, 2*runtime.GOMAXPROCS(0)))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: open SQLite %s: %w", path, err)
	}
	return &sqliteBackend{db: db}, nil
}

func (b *sqliteBackend) query(ctx context.Context, types []colType, sql string, args []any) (rowSource, error) {
	rows, err := b.db.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return newSQLiteRows(rows, types), nil
}

func (b *sqliteBackend) stream(ctx context.Context, types []colType, sql string, args []any) (rowSource, error) {
	return b.query(ctx, types, sql, args)
}

func (b *sqliteBackend) exec(ctx context.Context, sql string, args ...any) error {
	_, err := b.db.ExecContext(ctx, sql, args...)
	return err
}

func (b *sqliteBackend) inUse() int    { return b.db.Stats().InUse }
func (b *sqliteBackend) maxConns() int { return b.db.Stats().MaxOpenConnections }
func (b *sqliteBackend) close()        { b.db.Close() }

func (b *sqliteBackend) poolStats() PoolStats {
	st := b.db.Stats()
	return PoolStats{InUse: st.InUse, Idle: st.Idle, Max: st.MaxOpenConnections, Waits: st.WaitCount, WaitTime: st.WaitDuration}
}

type sqliteRows struct {
	rows   *sql.Rows
	types  []colType
	dest   []any
	ints   []sql.NullInt64
	floats []sql.NullFloat64
	texts  []sql.RawBytes
	keep   [][]byte
}

func newSQLiteRows(rows *sql.Rows, types []colType) *sqliteRows {
	r := &sqliteRows{rows: rows, types: types, dest: make([]any, len(types)),
		ints: make([]sql.NullInt64, len(types)), floats: make([]sql.NullFloat64, len(types)),
		texts: make([]sql.RawBytes, len(types)), keep: make([][]byte, len(types))}
	for i, t := range types {
		switch t {
		case tInt:
			r.dest[i] = &r.ints[i]
		case tFloat:
			r.dest[i] = &r.floats[i]
		default:
			r.dest[i] = &r.texts[i]
			r.keep[i] = make([]byte, 0, 64)
		}
	}
	return r
}

func (r *sqliteRows) next() bool   { return r.rows.Next() }
func (r *sqliteRows) err() error   { return r.rows.Err() }
func (r *sqliteRows) close() error { return r.rows.Close() }

func (r *sqliteRows) values(dst []query.Value) error {
	for i, t := range r.types {
		if t == tText {
			// A non-nil empty buffer: database/sql appends a text value
			// into it, so "" stays distinct from NULL (which sets nil).
			r.texts[i] = r.keep[i][:0]
		}
	}
	if err := r.rows.Scan(r.dest...); err != nil {
		return err
	}
	for i, t := range r.types {
		v := &dst[i]
		switch t {
		case tInt:
			*v = query.Value{Null: !r.ints[i].Valid, Int: r.ints[i].Int64}
		case tFloat:
			*v = query.Value{Null: !r.floats[i].Valid, Float: r.floats[i].Float64}
		default:
			b := r.texts[i]
			*v = query.Value{Null: b == nil, Bytes: b}
			if b != nil && cap(b) > cap(r.keep[i]) {
				r.keep[i] = b[:0]
			}
		}
	}
	return nil
}
