package sqlstore

import (
	"context"
	"fmt"
	"strconv"
)

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
