package sqlstore_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

func TestDSNForms(t *testing.T) {
	for _, tc := range []struct {
		dsn      string
		postgres bool
		bad      string // in the error; "" when accepted
	}{
		{dsn: "postgres://ann@db/odata", postgres: true},
		{dsn: "postgresql://ann:s3cret@db/odata?sslmode=require", postgres: true},
		{dsn: "host=db user=ann password=s3cret dbname=odata", postgres: true},
		{dsn: "  dbname=odata", postgres: true},
		{dsn: "sqlite:/var/lib/sluice/odata.sqlite"},
		{dsn: "odata.sqlite"},
		{dsn: "./a=b.sqlite"},
		{dsn: "", bad: "not given"},
		{dsn: "mysql://ann:s3cret@db/odata", bad: `scheme "mysql" is not known`},
		{dsn: "hots=db user=ann password=s3cret dbname=odata", bad: "names no known keyword"},
	} {
		err := sqlstore.CheckDSN(tc.dsn)
		if got := sqlstore.IsPostgres(tc.dsn); got != tc.postgres {
			t.Errorf("%q: IsPostgres %v", tc.dsn, got)
		}
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%q: %v", tc.dsn, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%q: %v, want an error with %q", tc.dsn, err, tc.bad)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%q: the error shows the password: %v", tc.dsn, err)
		}
	}
	// A refused DSN creates no SQLite file named after it.
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := sqlstore.Open(context.Background(), "hots=db password=s3cret"); err == nil {
		t.Fatal("a misspelt keyword DSN opened")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files created: %v", entries)
	}
}

// libpq's keyword form opens PostgreSQL, as the URL form does.
func TestKeywordDSNOpensPostgres(t *testing.T) {
	u, err := url.Parse(testenv.SharedPostgres(t).CreateDatabase(t, t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	kw := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"))
	if p, ok := u.User.Password(); ok {
		kw += " password=" + p
	}
	db, err := sqlstore.Open(context.Background(), kw)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer db.Close()
	if _, _, err := db.AddKey(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
}
