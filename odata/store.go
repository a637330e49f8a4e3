package odata

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// Store is what the server reads pages from. *sqlstore.DB implements it.
type Store interface {
	// Probe decides the page of q: its id range and whether more follow.
	Probe(ctx context.Context, q *query.Query) (query.Page, error)
	// Rows streams the page; the cursor must be closed.
	Rows(ctx context.Context, q *query.Query, p query.Page) (query.Cursor, error)
	// Count counts the rows matching q's filter.
	Count(ctx context.Context, q *query.Query) (int64, error)
	// ValueBytesBound cheaply bounds the JSON size of the values of rows
	// rows of q; ExactValueBytes bounds it from the page's actual rows.
	ValueBytesBound(ctx context.Context, q *query.Query, rows int) (int64, error)
	ExactValueBytes(ctx context.Context, q *query.Query, p query.Page) (int64, error)
}

// KeyStore checks API keys. *sqlstore.DB implements it (keys are stored
// hashed; see sqlstore.DB.AddKey).
type KeyStore interface {
	// CheckKey returns the key's id and whether it is active; unknown
	// and revoked keys both give ok == false.
	CheckKey(ctx context.Context, key string) (id string, ok bool, err error)
}

// OpenStore opens the store a DSN names: "postgres://..." (or
// "postgresql://...") is PostgreSQL through pgx; "sqlite:/path" or a plain
// file path is an embedded SQLite file, created when missing. The schema is
// migrated on open. The returned store is both the Store and the KeyStore
// of NewServer.
func OpenStore(ctx context.Context, dsn string) (*sqlstore.DB, error) {
	return sqlstore.Open(ctx, dsn)
}

// DemoRows is the size of the data set EnsureDemo generates.
const DemoRows = 200_000

// EnsureDemo prepares a demo: when the store has no observations it
// generates a data set of rows observations (DemoRows when rows <= 0) with
// progress reported to progress (may be nil); then it revokes earlier demo
// keys and returns a new one, named "demo" (stored hashed, so an old one
// cannot be shown again).
func EnsureDemo(ctx context.Context, db *sqlstore.DB, rows int, progress func(done, total int64)) (string, error) {
	empty, err := db.Empty(ctx)
	if err != nil {
		return "", err
	}
	if empty {
		if rows <= 0 {
			rows = DemoRows
		}
		g, err := gen.New(gen.DefaultConfig(int64(rows)))
		if err != nil {
			return "", err
		}
		var report func(int64)
		if progress != nil {
			report = func(done int64) { progress(done, int64(rows)) }
		}
		if _, err := gen.Load(ctx, db, g, report); err != nil {
			return "", fmt.Errorf("odata: generate demo data: %w", err)
		}
	}
	if _, err := db.RevokeKey(ctx, "demo"); err != nil {
		return "", err
	}
	key, _, err := db.AddKey(ctx, "demo")
	return key, err
}
