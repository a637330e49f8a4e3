package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
	// ReadOnly opens the store only to read: an SQLite file must exist and
	// is opened in mode=ro, and the schema is not brought up to date (a
	// store that needs it fails its reads).
	ReadOnly bool
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
		be, err := openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"), cfg.ReadOnly)
		if err != nil {
			return nil, err
		}
		db.d, db.be = sqliteDialect, be
	}
	if cfg.ReadOnly {
		return db, nil
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

// PoolStats are the connection pool's figures.
type PoolStats struct {
	InUse, Idle, Max int
	// Waits counts connection requests that found the pool empty and
	// waited, and WaitTime is their total wait, since the store opened.
	Waits    int64
	WaitTime time.Duration
}

// PoolStats reads the pool's figures now.
func (db *DB) PoolStats() PoolStats { return db.be.poolStats() }

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
	poolStats() PoolStats
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
