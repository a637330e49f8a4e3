package sqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the embedded store's driver

	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

// DB is an open store, PostgreSQL or SQLite. It is safe for concurrent use.
type DB struct {
	d  dialect
	be backend

	statsMu   sync.Mutex
	stats     map[string]jsonenc.Width // "table.column" → bounds of stored values
	statsRead time.Time
	now       func() time.Time
}

// statsTTL is how long size bounds are reused before they are read again,
// so that a load by another process is seen within seconds.
const statsTTL = 5 * time.Second

// IsPostgres reports whether a DSN names a PostgreSQL database: a URL
// (postgres:// or postgresql://) or libpq's keyword form
// ("host=db user=ann dbname=odata"). Anything else CheckDSN accepts is an
// SQLite file ("sqlite:/path", "sqlite:path" or a plain path).
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || keywordForm(dsn)
}

// libpqKeywords are the connection parameters of libpq's keyword form
// (PostgreSQL documentation, "Parameter Key Words") that pgx reads.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true,
	"passfile": true, "connect_timeout": true, "sslmode": true, "sslcert": true, "sslkey": true,
	"sslrootcert": true, "sslpassword": true, "sslsni": true, "application_name": true,
	"target_session_attrs": true, "service": true, "servicefile": true, "options": true,
	"pool_max_conns": true, "pool_min_conns": true,
}

// keywordForm reports whether dsn begins with a libpq keyword and "=".
func keywordForm(dsn string) bool {
	k, _, ok := strings.Cut(strings.TrimSpace(dsn), "=")
	return ok && libpqKeywords[strings.TrimSpace(k)]
}

// CheckDSN refuses a DSN of no form Open knows, naming the forms it does;
// the error quotes no more of it than its scheme, which holds no secret.
func CheckDSN(dsn string) error {
	if strings.TrimSpace(dsn) == "" {
		return errors.New("sqlstore: the database is not given; use postgres://user@host/db, libpq keywords (host=… dbname=…) or sqlite:/path/file.sqlite")
	}
	if IsPostgres(dsn) || strings.HasPrefix(dsn, "sqlite:") {
		return nil
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok {
		return fmt.Errorf("sqlstore: the database URL scheme %q is not known; use postgres://user@host/db (or postgresql://), libpq keywords (host=… dbname=…) or sqlite:/path/file.sqlite", scheme)
	}
	if strings.Contains(dsn, "=") && strings.ContainsAny(dsn, " \t") {
		return errors.New("sqlstore: the database looks like libpq keywords but names no known keyword first (host, port, dbname, user, password, sslmode, …); use postgres://user@host/db, libpq keywords or sqlite:/path/file.sqlite")
	}
	return nil // a file path: SQLite
}

// Config tunes a store opened with OpenWith. The zero value is Open's
// behaviour: no statement timeout.
type Config struct {
	// StatementTimeout bounds every read statement on the database server
	// itself (PostgreSQL statement_timeout), so a costly statement stops
	// even when its client is gone; 0 sets none. Loads, VACUUM and key
	// changes are not bound by it. On SQLite, which has no such setting,
	// the context of each call bounds it (the driver interrupts the
	// statement when the context ends).
	StatementTimeout time.Duration
	// StreamTimeout replaces StatementTimeout for the row streams of
	// Rows, whose statements last as long as their client takes to read
	// the page; 0 means StatementTimeout.
	StreamTimeout time.Duration
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	if c.StatementTimeout < 0 || c.StreamTimeout < 0 {
		return errors.New("sqlstore: timeouts must not be negative")
	}
	return nil
}

// Open connects to the store named by dsn and brings its schema up to date.
// PostgreSQL DSNs may set pool_max_conns; SQLite files are created when
// missing.
func Open(ctx context.Context, dsn string) (*DB, error) { return OpenWith(ctx, dsn, Config{}) }

// OpenWith is Open with a Config.
func OpenWith(ctx context.Context, dsn string, cfg Config) (*DB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StreamTimeout == 0 {
		cfg.StreamTimeout = cfg.StatementTimeout
	}
	if err := CheckDSN(dsn); err != nil {
		return nil, err
	}
	db := &DB{now: time.Now}
	if IsPostgres(dsn) {
		be, err := openPostgres(ctx, dsn, cfg)
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

// MaxConns is the size of the connection pool. A server keeps its
// concurrent data queries below it, so that API key checks always find a
// connection.
func (db *DB) MaxConns() int { return db.be.maxConns() }

// backend is the little the store needs from a driver.
type backend interface {
	// query runs a read statement. A statement that fails on a broken
	// pooled connection before returning a row is retried once on
	// another connection: reads are safe to repeat, and after a database
	// restart every idle pooled connection is broken.
	query(ctx context.Context, types []colType, sql string, args []any) (rowSource, error)
	// stream is query for a row stream (Config.StreamTimeout).
	stream(ctx context.Context, types []colType, sql string, args []any) (rowSource, error)
	exec(ctx context.Context, sql string, args ...any) error
	begin(ctx context.Context) (loadTx, error)
	inUse() int
	maxConns() int
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

type pgBackend struct {
	pool *pgxpool.Pool
	cfg  Config
}

func openPostgres(ctx context.Context, dsn string, c Config) (*pgBackend, error) {
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
	if c.StatementTimeout > 0 {
		// The session default of every pooled connection: reads need no
		// round trip to set it; loads, exec and streams change it.
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(1, c.StatementTimeout.Milliseconds()), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: connect postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sqlstore: connect postgres: %w", err)
	}
	return &pgBackend{pool: pool, cfg: c}, nil
}

func (b *pgBackend) query(ctx context.Context, types []colType, sql string, args []any) (rowSource, error) {
	return b.read(ctx, types, sql, args, 0)
}

func (b *pgBackend) stream(ctx context.Context, types []colType, sql string, args []any) (rowSource, error) {
	timeout := time.Duration(0)
	if b.cfg.StatementTimeout > 0 && b.cfg.StreamTimeout != b.cfg.StatementTimeout {
		timeout = b.cfg.StreamTimeout
	}
	return b.read(ctx, types, sql, args, timeout)
}

// read runs a read statement and fetches its first row, retrying once when
// that fails on a broken connection. timeout > 0 sets the statement's own
// timeout on the connection for as long as its rows are open.
func (b *pgBackend) read(ctx context.Context, types []colType, sql string, args []any, timeout time.Duration) (rowSource, error) {
	for attempt := 0; ; attempt++ {
		r, err := b.readOnce(ctx, types, sql, args, timeout)
		if err == nil || attempt > 0 || ctx.Err() != nil || !brokenConn(err) {
			return r, err
		}
	}
}

func (b *pgBackend) readOnce(ctx context.Context, types []colType, sql string, args []any, timeout time.Duration) (rowSource, error) {
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	r := &pgRows{types: types, conn: c}
	if timeout > 0 {
		if _, err := c.Exec(ctx, "SELECT set_config('statement_timeout', $1, false)", strconv.FormatInt(max(1, timeout.Milliseconds()), 10)); err != nil {
			r.discard()
			return nil, err
		}
		r.reset = true
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		r.release()
		return nil, err
	}
	r.rows = rows
	r.peeked, r.has = true, rows.Next()
	if !r.has {
		if err := rows.Err(); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// brokenConn reports whether err comes from the connection rather than the
// statement: the server closed it (restart, idle timeout, terminated
// backend) or the network failed.
func brokenConn(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01..57P03: the server is shutting
		// down, crashed, or not yet accepting connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && !ne.Timeout()) ||
		strings.Contains(err.Error(), "conn closed")
}

// Unavailable reports whether err means the database cannot be reached
// now (down, restarting, refusing connections, or an SQLite file locked
// by a writer): the request may succeed later, so it is a 503, not a 500.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || brokenConn(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// TimedOut reports whether err is a statement stopped by its timeout
// (Config.StatementTimeout on PostgreSQL, SQLSTATE 57014) or by its
// context's deadline.
func TimedOut(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "57014" {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

func (b *pgBackend) exec(ctx context.Context, sql string, args ...any) error {
	if b.cfg.StatementTimeout == 0 {
		_, err := b.pool.Exec(ctx, sql, args...)
		return err
	}
	// Writes and maintenance (VACUUM after a load) are not reads: the
	// read timeout is lifted for them.
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	r := &pgRows{conn: c, reset: true}
	defer r.release()
	if _, err := c.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return err
	}
	_, err = c.Exec(ctx, sql, args...)
	return err
}

func (b *pgBackend) inUse() int    { return int(b.pool.Stat().AcquiredConns()) }
func (b *pgBackend) maxConns() int { return int(b.pool.Config().MaxConns) }
func (b *pgBackend) close()        { b.pool.Close() }

type pgRows struct {
	rows   pgx.Rows
	types  []colType
	conn   *pgxpool.Conn
	reset  bool // the connection's statement_timeout was changed
	peeked bool // the first row was fetched by read; has says if there was one
	has    bool
}

func (r *pgRows) next() bool {
	if r.peeked {
		r.peeked = false
		return r.has
	}
	return r.rows.Next()
}

func (r *pgRows) err() error { return r.rows.Err() }

func (r *pgRows) close() error {
	if r.conn == nil {
		return nil
	}
	r.rows.Close()
	err := r.rows.Err()
	r.release()
	return err
}

// release gives the connection back, first restoring its session default
// timeout when it was changed; a connection that cannot be restored is
// closed instead of going back to the pool.
func (r *pgRows) release() {
	c := r.conn
	if c == nil {
		return
	}
	r.conn = nil
	if r.reset && !c.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Exec(ctx, "RESET statement_timeout")
		cancel()
		if err != nil {
			conn := c.Hijack()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(ctx)
			cancel()
			return
		}
	}
	c.Release()
}

// discard closes the connection rather than pooling it (its session state
// is unknown).
func (r *pgRows) discard() {
	c := r.conn
	r.conn = nil
	conn := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = conn.Close(ctx)
	cancel()
}

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
