package sqlstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/odata/query"
)

// pgBackend is PostgreSQL through pgx, the production store.
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
	var rows pgx.Rows
	if timeout > 0 {
		rows, err = r.queryWithTimeout(ctx, timeout, sql, args)
	} else {
		rows, err = c.Query(ctx, sql, args...)
	}
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

// queryWithTimeout runs the statement under its own statement_timeout in
// the one round trip of a pipeline: set_config(..., true) and the statement
// share the implicit transaction that the pipeline's Sync ends, so the
// setting applies to the statement (whose timer starts with it) and lapses
// by itself, leaving the connection's session default as it was.
func (r *pgRows) queryWithTimeout(ctx context.Context, timeout time.Duration, sql string, args []any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(max(1, timeout.Milliseconds()), 10))
	b.Queue(sql, args...)
	br := r.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	r.batch = br
	return rows, nil
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

func (b *pgBackend) poolStats() PoolStats {
	st := b.pool.Stat()
	return PoolStats{InUse: int(st.AcquiredConns()), Idle: int(st.IdleConns()), Max: int(st.MaxConns()),
		Waits: st.EmptyAcquireCount(), WaitTime: st.EmptyAcquireWaitTime()}
}
func (b *pgBackend) close() { b.pool.Close() }

type pgRows struct {
	rows   pgx.Rows
	batch  pgx.BatchResults // the pipeline rows came from, if any
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
	if r.batch != nil {
		if berr := r.batch.Close(); err == nil {
			err = berr
		}
	}
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
