package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.WithSharedStop(m))
}

type backend struct {
	name string
	dsn  func(t *testing.T) string
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "s.sqlite") }},
		{"postgres", func(t *testing.T) string { return testenv.SharedPostgres(t).CreateDatabase(t, t.Name()) }},
	}
}

func openDB(t *testing.T, dsn string) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Every documented filter form's page probe is an index range scan on
// observations: no sequential scan of the table, in either store. The data
// is big enough that a full scan would be a real cost.
func TestProbeUsesIndexes(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := openDB(t, b.dsn(t))
			g, err := gen.New(gen.Config{Rows: 60000, Datasets: 12, Locations: 300, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gen.Load(context.Background(), db, g, nil); err != nil {
				t.Fatal(err)
			}
			doi := g.Datasets()[3].DOI
			for _, tc := range []struct {
				filter string
				// ordered: the probe must be range scans that yield ids in
				// order (no sort); otherwise only table and primary-key scans
				// are refused.
				ordered bool
			}{
				{"CharacteristicName eq 'Titanium'", true},
				{"DOI eq '" + doi + "'", true},
				{"LocationId eq 17", true},
				{"ActivityMediaName eq 'Groundwater'", true},
				{"ActivityGroupType eq 'Lab Sample'", true},
				{"MonitoringLocationType eq 'Estuary'", true},
				{"ActivityStartYear eq 2003", true},
				{"RegionId eq 'hub.atlantic'", true},
				{"RegionId eq 'admin.4.ca.pe'", true},
				// Each arm is an index-only range scan limited to $top+1;
				// PostgreSQL deduplicates and sorts those (bounded) ids.
				{"CharacteristicName in ('Titanium','Arsenic')", b.name == "sqlite"},
				{"CharacteristicName eq 'Titanium' or ActivityMediaName eq 'Groundwater'", b.name == "sqlite"},
				// The clients' partitioned pulls have a composite index.
				{"LocationId eq 17 and CharacteristicName eq 'pH'", true},
				// Other conjunctions are driven by one column's index and
				// filter the rest; PostgreSQL may collect and sort that
				// column's remaining matches when it expects few.
				{"RegionId eq 'hub.atlantic' and CharacteristicName eq 'Titanium'", false},
			} {
				q, err := query.Parse(query.Observations, []query.Param{{Name: "$filter", Value: tc.filter}, {Name: "$top", Value: "1000"}})
				if err != nil {
					t.Fatal(err)
				}
				plan, err := db.Explain(context.Background(), q)
				if err != nil {
					t.Fatalf("%s: %v", tc.filter, err)
				}
				if bad := badScan(b.name, plan, tc.ordered); bad != "" {
					t.Errorf("%s: %q in plan\n%s", tc.filter, bad, strings.Join(plan, "\n"))
				}
			}
		})
	}
}

// badScan returns a plan line that reads observations other than by ranges
// of (filter column, id) indexes: a table scan or a primary-key scan with
// the filter applied row by row, and, when ordered, a sort (a branch read
// whole instead of merged).
func badScan(store string, plan []string, ordered bool) string {
	for _, line := range plan {
		switch store {
		case "postgres":
			if strings.Contains(line, "Seq Scan on observations") || strings.Contains(line, "observations_pkey") {
				return line
			}
			if ordered && strings.Contains(line, "Sort") && !strings.HasPrefix(line, "Sort Key") {
				return line
			}
		default:
			// SQLite: "SCAN o" is a full scan; "SEARCH o USING ..." a range.
			if strings.HasPrefix(line, "SCAN o") || strings.Contains(line, "PRIMARY KEY") {
				return line
			}
			if ordered && strings.Contains(line, "TEMP B-TREE") {
				return line
			}
		}
	}
	return ""
}

func TestBranches(t *testing.T) {
	for _, tc := range []struct {
		filter string
		n      int // 0: not split
	}{
		{"CharacteristicName eq 'a'", 0},
		{"CharacteristicName in ('a','b','c')", 3},
		{"CharacteristicName eq 'a' or DOI eq 'x'", 2},
		{"CharacteristicName in ('a','b') and (DOI eq 'x' or DOI eq 'y')", 4},
		{"(CharacteristicName eq 'a' or CharacteristicName eq 'b') and (DOI eq 'x' or DOI eq 'y') and (LocationId eq 1 or LocationId eq 2) and (ActivityStartYear eq 1 or ActivityStartYear eq 2) and (RegionId eq 'hub.x' or RegionId eq 'hub.y')", 0}, // 32 > 16
		{"CharacteristicName in (" + strings.Repeat("'a',", 20) + "'b')", 0},
	} {
		f, err := query.ParseFilter(query.Observations, tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(sqlstore.Branches(f)); got != tc.n {
			t.Errorf("%s: %d branches, want %d", tc.filter, got, tc.n)
		}
	}
}

func TestMigrate(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			db := openDB(t, dsn)
			db2 := openDB(t, dsn) // an existing store opens as it is
			if empty, err := db2.Empty(context.Background()); err != nil || !empty {
				t.Fatalf("Empty = %v, %v", empty, err)
			}
			if err := db.Exec(context.Background(), fmt.Sprintf("INSERT INTO schema_version (version) VALUES (%d)", sqlstore.SchemaVersion+1)); err != nil {
				t.Fatal(err)
			}
			if _, err := sqlstore.Open(context.Background(), dsn); err == nil || !strings.Contains(err.Error(), "newer than this program") {
				t.Fatalf("opening a newer schema: %v", err)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, b.dsn(t))
			secret, k, err := db.AddKey(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if len(secret) != 40 || !strings.HasPrefix(k.ID, "key_") {
				t.Fatalf("secret %q, key %+v", secret, k)
			}
			if id, ok, err := db.CheckKey(ctx, secret); err != nil || !ok || id != k.ID {
				t.Fatalf("check: %q %v %v", id, ok, err)
			}
			for _, bad := range []string{"", "nope", secret[:39], secret + "x"} {
				if _, ok, err := db.CheckKey(ctx, bad); err != nil || ok {
					t.Fatalf("check %q: %v %v", bad, ok, err)
				}
			}
			s2, _, _ := db.AddKey(ctx, "bob")
			if n, err := db.RevokeKey(ctx, "alice"); err != nil || n != 1 {
				t.Fatalf("revoke: %d %v", n, err)
			}
			if n, _ := db.RevokeKey(ctx, "alice"); n != 0 {
				t.Fatalf("second revoke revoked %d", n)
			}
			if _, ok, _ := db.CheckKey(ctx, secret); ok {
				t.Fatal("revoked key still accepted")
			}
			if _, ok, _ := db.CheckKey(ctx, s2); !ok {
				t.Fatal("other key refused")
			}
			// Both keys may be created in the same millisecond, when the
			// order between them is their random ids': look them up by name.
			keys, err := db.ListKeys(ctx)
			revoked := map[string]bool{}
			for _, k := range keys {
				revoked[k.Name] = k.RevokedAt != ""
			}
			if err != nil || len(keys) != 2 || !revoked["alice"] || revoked["bob"] {
				t.Fatalf("list: %+v %v", keys, err)
			}
		})
	}
}

// A bulk load into an empty PostgreSQL store leaves every observations page
// all-visible, so the probes are index-only scans from the first request,
// whatever the server's commit settings (the test server runs with
// synchronous_commit off).
func TestBulkLoadAllVisible(t *testing.T) {
	dsn := backends()[1].dsn(t)
	db := openDB(t, dsn)
	g, err := gen.New(gen.Config{Rows: 20000, Datasets: 12, Locations: 300, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Load(context.Background(), db, g, nil); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var pages, visible int64
	if err := c.QueryRow(context.Background(), "SELECT relpages, relallvisible FROM pg_class WHERE relname = 'observations'").Scan(&pages, &visible); err != nil {
		t.Fatal(err)
	}
	if pages == 0 || visible != pages {
		t.Fatalf("%d of %d pages all-visible", visible, pages)
	}
}
