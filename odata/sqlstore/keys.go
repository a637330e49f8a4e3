package sqlstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/odata/query"
)

// APIKey describes a stored key. The secret itself is never stored: only
// its SHA-256, which is enough because secrets are 160 random bits.
type APIKey struct {
	ID        string
	Name      string
	CreatedAt string
	RevokedAt string // empty while the key is active
}

func hashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

func (db *DB) ph(n int) string { return string(db.d.appendPlaceholder(nil, n)) }

// AddKey creates a key and returns its secret, which is shown once.
func (db *DB) AddKey(ctx context.Context, name string) (string, APIKey, error) {
	secret := randomHex(20)
	k := APIKey{ID: "key_" + randomHex(6), Name: name, CreatedAt: db.now().UTC().Format(query.TimestampLayout)}
	err := db.be.exec(ctx, "INSERT INTO api_keys (id, name, hash, created_at) VALUES ("+
		db.ph(1)+", "+db.ph(2)+", "+db.ph(3)+", "+db.ph(4)+")", k.ID, k.Name, hashKey(secret), k.CreatedAt)
	if err != nil {
		return "", APIKey{}, fmt.Errorf("sqlstore: add key: %w", err)
	}
	return secret, k, nil
}

// ListKeys returns every key, active and revoked, oldest first.
func (db *DB) ListKeys(ctx context.Context) ([]APIKey, error) {
	rs, err := db.be.query(ctx, []colType{tText, tText, tText, tText},
		"SELECT id, name, created_at, revoked_at FROM api_keys ORDER BY created_at, id", nil)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list keys: %w", err)
	}
	defer rs.close()
	var out []APIKey
	vals := make([]query.Value, 4)
	for rs.next() {
		if err := rs.values(vals); err != nil {
			return nil, err
		}
		out = append(out, APIKey{ID: string(vals[0].Bytes), Name: string(vals[1].Bytes),
			CreatedAt: string(vals[2].Bytes), RevokedAt: string(vals[3].Bytes)})
	}
	return out, rs.err()
}

// RevokeKey revokes the active keys whose id or name is idOrName and returns
// how many it revoked.
func (db *DB) RevokeKey(ctx context.Context, idOrName string) (int, error) {
	tx, err := db.be.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: revoke key: %w", err)
	}
	defer tx.rollback()
	where := " WHERE (id = " + db.ph(1) + " OR name = " + db.ph(2) + ") AND revoked_at IS NULL"
	n, err := tx.queryInt(ctx, "SELECT count(*) FROM api_keys"+where, idOrName, idOrName)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: revoke key: %w", err)
	}
	now := db.now().UTC().Format(query.TimestampLayout)
	if err := tx.exec(ctx, "UPDATE api_keys SET revoked_at = "+db.ph(3)+where, idOrName, idOrName, now); err != nil {
		return 0, fmt.Errorf("sqlstore: revoke key: %w", err)
	}
	if err := tx.commit(ctx); err != nil {
		return 0, fmt.Errorf("sqlstore: revoke key: %w", err)
	}
	return int(n), nil
}

// CheckKey looks a secret up. ok is false for an unknown or revoked key;
// id names the key for rate limiting and logs.
func (db *DB) CheckKey(ctx context.Context, secret string) (id string, ok bool, err error) {
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return "", false, nil
	}
	rs, err := db.be.query(ctx, []colType{tText, tText},
		"SELECT id, revoked_at FROM api_keys WHERE hash = "+db.ph(1), []any{hashKey(secret)})
	if err != nil {
		return "", false, fmt.Errorf("sqlstore: check key: %w", err)
	}
	defer rs.close()
	vals := make([]query.Value, 2)
	if !rs.next() {
		return "", false, rs.err()
	}
	if err := rs.values(vals); err != nil {
		return "", false, err
	}
	return string(vals[0].Bytes), vals[1].Null, rs.err()
}
