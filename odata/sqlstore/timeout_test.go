package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// Every read statement has a timeout on the PostgreSQL server itself: a
// statement that outlives it is stopped by the server (the context has no
// deadline here), reported as TimedOut; row streams get the stream timeout,
// and loads and exec are not bound by it.
func TestStatementTimeoutPostgres(t *testing.T) {
	dsn := testenv.SharedPostgres(t).CreateDatabase(t, t.Name())
	ctx := context.Background()
	db, err := sqlstore.OpenWith(ctx, dsn, sqlstore.Config{StatementTimeout: 200 * time.Millisecond, StreamTimeout: 7 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		sql    string
		stream bool
		want   string
	}{
		{"SHOW statement_timeout", false, "200ms"},
		{"SHOW statement_timeout", true, "7min"},
		{"SHOW statement_timeout", false, "200ms"}, // the stream's setting lapsed
	} {
		for range 3 { // several pooled connections
			if got, err := db.ReadText(ctx, c.sql, c.stream); err != nil || got != c.want {
				t.Fatalf("%s (stream %v): %q %v, want %q", c.sql, c.stream, got, err, c.want)
			}
		}
	}
	// A stream runs under its own timeout, not the read timeout.
	if _, err := db.ReadText(ctx, "SELECT pg_sleep(0.4)::text", true); err != nil {
		t.Fatalf("a 0.4 s stream under a 200 ms read timeout: %v", err)
	}
	if got, err := db.ReadText(ctx, "SHOW statement_timeout", false); err != nil || got != "200ms" {
		t.Fatalf("after a stream: %q %v", got, err)
	}
	_, err = db.ReadText(ctx, "SELECT pg_sleep(5)::text", false)
	if err == nil || !sqlstore.TimedOut(err) || sqlstore.Unavailable(err) {
		t.Fatalf("a 5 s statement under a 200 ms timeout: %v (timed out %v)", err, sqlstore.TimedOut(err))
	}
	// A load runs longer than the read timeout without being stopped.
	g, err := gen.New(gen.Config{Rows: 2000, Datasets: 3, Locations: 20, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Load(ctx, db, g, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(ctx, "SELECT pg_sleep(0.4)"); err != nil {
		t.Fatalf("exec is bound by the read timeout: %v", err)
	}
	if got, err := db.ReadText(ctx, "SHOW statement_timeout", false); err != nil || got != "200ms" {
		t.Fatalf("after exec: %q %v", got, err)
	}
}

// After the database drops every connection (a restart does the same), the
// first read does not fail: it is retried once on a fresh connection.
func TestRetryOnBrokenConnectionPostgres(t *testing.T) {
	dsn := testenv.SharedPostgres(t).CreateDatabase(t, t.Name())
	ctx := context.Background()
	db := openDB(t, dsn)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for round := 0; round < 3; round++ {
		if _, err := db.ReadText(ctx, "SELECT 'warm'", false); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = 'sluice-odata' AND datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no pooled connection to terminate")
		}
		got, err := db.ReadText(ctx, "SELECT 'after'", false)
		if err != nil || got != "after" {
			t.Fatalf("round %d: the first read after the connections died: %q %v", round, got, err)
		}
	}
}
