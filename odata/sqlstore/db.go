package sqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the embedded store's driver

	"github.com/sluicehq/sluice/odata/query"
)

// DB is an open store, PostgreSQL or SQLite. It is safe for concurrent use.
type DB struct {
	d  dialect
	be backend

	statsMu   sync.Mutex
	stats     map[string]width // "table.column" → bounds of stored values
	statsRead time.Time
	now       func() time.Time
}

// statsTTL is how long size bounds are reused before they are read again,
// so that a load by another process is seen within seconds.
const statsTTL = 5 * time.Second

// IsPostgres reports whether a DSN names a PostgreSQL database; anything
// else is an SQLite file ("sqlite:/path", "sqlite:path" or a plain path).
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open connects to the store named by dsn and brings its schema up to date.
// PostgreSQL DSNs may set pool_max_conns; SQLite files are created when
// missing.
func Open(ctx context.Context, dsn string) (*DB, error) {
	db := &DB{now: time.Now}
	if IsPostgres(dsn) {
		be, err := openPostgres(ctx, dsn)
		if err != nil {
			return nil, err
		}
		db.d, db.be = postgresDialect, be
	} else {
		be, err := openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
		if err != nil {
			return nil, err
		}
		db.d, db.be = sqliteDialect, be
	}
	if err := db.migrate(ctx); err != nil {
		db.be.close()
		return nil, err
	}
	return db, nil
}

// Close releases every connection. Cursors must be closed first.
func (db *DB) Close() error {
	db.be.close()
	return nil
}

// InUse returns the number of connections currently taken from the pool,
// which tests use to check that an abandoned page gave its connection back.
func (db *DB) InUse() int { return db.be.inUse() }

// backend is the little the store needs from a driver.
type backend interface {
	query(ctx context.Context, types []colType, sql string, args []any) (rowSource, error)
	exec(ctx context.Context, sql string, args ...any) error
	begin(ctx context.Context) (loadTx, error)
	inUse() int
	close()
}

// rowSource is an open result set.
type rowSource interface {
	next() bool
	// values decodes the current row into dst (one Value per column);
	// Bytes stay valid until the next call to next.
	values(dst []query.Value) error
	err() error
	close() error
}

// --- PostgreSQL through pgx -------------------------------------------------

type pgBackend struct{ pool *pgxpool.Pool }

func openPostgres(ctx context.Context, dsn string) (*pgBackend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: postgres DSN: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = int32(max(8, 2*runtime.GOMAXPROCS(0)))
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-odata"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: connect postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sqlstore: connect postgres: %w", err)
	}
	return &pgBackend{pool: pool}, nil
}

func (b *pgBackend) query(ctx context.Context, types []colType, sql string, args []any) (rowSource, error) {
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return &pgRows{rows: rows, types: types}, nil
}

func (b *pgBackend) exec(ctx context.Context, sql string, args ...any) error {
	_, err := b.pool.Exec(ctx, sql, args...)
	return err
}

func (b *pgBackend) inUse() int { return int(b.pool.Stat().AcquiredConns()) }
func (b *pgBackend) close()     { b.pool.Close() }

type pgRows struct {
	rows  pgx.Rows
	types []colType
}

func (r *pgRows) next() bool   { return r.rows.Next() }
func (r *pgRows) err() error   { return r.rows.Err() }
func (r *pgRows) close() error { r.rows.Close(); return r.rows.Err() }

// values decodes the raw wire values: pgx picks the binary format for
// integers and floats and text for text, so no value is allocated.
func (r *pgRows) values(dst []query.Value) error {
	raw := r.rows.RawValues()
	fds := r.rows.FieldDescriptions()
	if len(raw) != len(dst) || len(fds) != len(dst) {
		return fmt.Errorf("sqlstore: %d columns, want %d", len(raw), len(dst))
	}
	for i, b := range raw {
		v := &dst[i]
		if b == nil {
			*v = query.Value{Null: true}
			continue
		}
		v.Null = false
		binaryFormat := fds[i].Format == pgx.BinaryFormatCode
		switch r.types[i] {
		case tInt:
			if !binaryFormat {
				n, err := strconv.ParseInt(string(b), 10, 64)
				if err != nil {
					return fmt.Errorf("sqlstore: integer column %d: %w", i, err)
				}
				v.Int = n
				continue
			}
			switch len(b) {
			case 8:
				v.Int = int64(binary.BigEndian.Uint64(b))
			case 4:
				v.Int = int64(int32(binary.BigEndian.Uint32(b)))
			case 2:
				v.Int = int64(int16(binary.BigEndian.Uint16(b)))
			default:
				return fmt.Errorf("sqlstore: integer column %d has %d bytes", i, len(b))
			}
		case tFloat:
			if !binaryFormat {
				f, err := strconv.ParseFloat(string(b), 64)
				if err != nil {
					return fmt.Errorf("sqlstore: float column %d: %w", i, err)
				}
				v.Float = f
				continue
			}
			switch len(b) {
			case 8:
				v.Float = math.Float64frombits(binary.BigEndian.Uint64(b))
			case 4:
				v.Float = float64(math.Float32frombits(binary.BigEndian.Uint32(b)))
			default:
				return fmt.Errorf("sqlstore: float column %d has %d bytes", i, len(b))
			}
		default:
			v.Bytes = b
		}
	}
	return nil
}

// --- SQLite through modernc.org/sqlite --------------------------------------

type sqliteBackend struct{ db *sql.DB }

func openSQLite(ctx context.Context, path string) (*sqliteBackend, error) {
	if path == "" {
		return nil, errors.New("sqlstore: empty SQLite path")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlstore: SQLite path %q may not contain '?' or '#'", path)
	}
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(30000)" +
		"&_pragma=journal_mode(WAL)" +
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

func (b *sqliteBackend) exec(ctx context.Context, sql string, args ...any) error {
	_, err := b.db.ExecContext(ctx, sql, args...)
	return err
}

func (b *sqliteBackend) inUse() int { return b.db.Stats().InUse }
func (b *sqliteBackend) close()     { b.db.Close() }

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

// --- schema ----------------------------------------------------------------

// schemaVersion is the version migrate brings a store to.
const schemaVersion = 1

func (db *DB) migrate(ctx context.Context) error {
	tx, err := db.be.begin(ctx)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	defer tx.rollback()
	if db.d.pg {
		// Two processes starting on an empty database must not both
		// create the schema.
		if err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(7361230)"); err != nil {
			return fmt.Errorf("sqlstore: migrate: %w", err)
		}
	}
	if err := tx.exec(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	v, err := tx.queryInt(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_version")
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	switch {
	case v == schemaVersion:
		return nil
	case v > schemaVersion:
		return fmt.Errorf("sqlstore: the store has schema version %d, newer than this program's %d", v, schemaVersion)
	}
	for _, t := range tables {
		if err := tx.exec(ctx, db.d.createTable(t)); err != nil {
			return fmt.Errorf("sqlstore: create %s: %w", t.name, err)
		}
		for _, ix := range t.indexes {
			if err := tx.exec(ctx, db.d.createIndex(t, ix)); err != nil {
				return fmt.Errorf("sqlstore: create index %s: %w", ix.name, err)
			}
		}
	}
	if err := tx.exec(ctx, "INSERT INTO schema_version (version) VALUES ("+strconv.Itoa(schemaVersion)+")"); err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	return nil
}
