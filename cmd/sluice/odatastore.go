package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/csvimport"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// defaultODataDB is the embedded store used when no -db is given; var/ is
// ignored by git.
const defaultODataDB = "sqlite:var/odata.sqlite"

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", defaultODataDB, `store: "postgres://user@host/db" or "sqlite:/path/file.sqlite" (or $SLUICE_DB, or the file $SLUICE_DB_FILE: keeps a password off the command line)`)
}

// parseWithDB parses the command's arguments, then fills in the store from
// the environment when -db was not given (dbFromEnv).
func parseWithDB(fs *flag.FlagSet, args []string, db *string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return dbFromEnv(fs, db, os.LookupEnv)
}

// withStore opens the store for a command that works on it until done or
// interrupted (import, generate, keys), and closes it after.
func withStore(dsn string, fn func(ctx context.Context, store *sqlstore.DB) error) error {
	ctx, stop := signalContext()
	defer stop()
	store, err := openODataStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(ctx, store)
}

// withStoreReadOnly is withStore for a command that only reads: an SQLite
// file is opened read-only and must exist (nothing is created, not even
// its directory); the schema is not migrated.
func withStoreReadOnly(dsn string, fn func(ctx context.Context, store *sqlstore.DB) error) error {
	ctx, stop := signalContext()
	defer stop()
	if err := sqlstore.CheckDSN(dsn); err != nil {
		return err
	}
	if !sqlstore.IsPostgres(dsn) {
		path := strings.TrimPrefix(dsn, "sqlite:")
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("the store %s cannot be read (nothing was created): %w", redact.String(dsn), err)
		}
	}
	store, err := sqlstore.OpenWith(ctx, dsn, sqlstore.Config{ReadOnly: true})
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(ctx, store)
}

// dbFromEnv fills in the store from SLUICE_DB or SLUICE_DB_FILE (a file
// holding the URL, as a mounted secret) when -db was not given, so that a
// password need not be on the command line, where ps and the debug port's
// cmdline show it. Call it after fs.Parse.
func dbFromEnv(fs *flag.FlagSet, db *string, lookup func(string) (string, bool)) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "db" })
	env, envSet := lookup("SLUICE_DB")
	file, fileSet := lookup("SLUICE_DB_FILE")
	switch {
	case envSet && fileSet:
		return errors.New("SLUICE_DB and SLUICE_DB_FILE are both set; set one")
	case given:
		return nil
	case envSet:
		if strings.TrimSpace(env) == "" {
			return errors.New("SLUICE_DB is set but empty")
		}
		*db = strings.TrimSpace(env)
	case fileSet:
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("SLUICE_DB_FILE: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return fmt.Errorf("SLUICE_DB_FILE: %s is empty", file)
		}
		*db = v
	}
	return nil
}

// openODataStore opens a store, creating the directory of an SQLite file.
// cfgs is at most one Config (none: no statement timeout, for the
// maintenance commands).
func openODataStore(ctx context.Context, dsn string, cfgs ...sqlstore.Config) (*sqlstore.DB, error) {
	if !sqlstore.IsPostgres(dsn) && !strings.HasPrefix(dsn, "sqlite:") {
		// Not echoed: a value of no known form is as likely a password
		// given in the wrong place as a file name.
		return nil, errors.New(`-db is neither a "postgres://" URL, libpq keywords ("host=... dbname=...") nor "sqlite:/path"; nothing was opened or created`)
	}
	if !sqlstore.IsPostgres(dsn) {
		if dir := filepath.Dir(strings.TrimPrefix(dsn, "sqlite:")); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
	}
	var cfg sqlstore.Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	return sqlstore.OpenWith(ctx, dsn, cfg)
}

func runImport(args []string) error {
	fs := newFlagSet("import", "import [-db DSN] [-metadata FILE.json] FILE.csv...", storeEnv)
	db := dbFlag(fs)
	meta := fs.String("metadata", "", "metadata JSON of the dataset the CSV files belong to (default: each CSV's <name>.json)")
	if err := parseWithDB(fs, args, db); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no CSV file given: sluice import [-db DSN] [-metadata FILE.json] FILE.csv...")
	}
	// Group the files by dataset, in the order given.
	var sets []csvimport.Dataset
	index := map[string]int{}
	for _, f := range fs.Args() {
		m := *meta
		if m == "" {
			m = strings.TrimSuffix(f, filepath.Ext(f)) + ".json"
		}
		i, ok := index[m]
		if !ok {
			i = len(sets)
			index[m] = i
			sets = append(sets, csvimport.Dataset{Metadata: m})
		}
		sets[i].CSV = append(sets[i].CSV, f)
	}
	return withStore(*db, func(ctx context.Context, store *sqlstore.DB) error {
		bar := newProgressBar(os.Stderr, "import", "bytes")
		res, err := csvimport.Import(ctx, store, sets, bar.update)
		bar.finish()
		if err != nil {
			return fmt.Errorf("nothing was imported: %w", err)
		}
		fmt.Printf("imported %d datasets, %d locations, %d observations into %s\n", res.Datasets, res.Locations, res.Observations, redact.String(*db))
		return nil
	})
}

func runGenerate(args []string) error {
	fs := newFlagSet("generate", "generate [-db DSN] [-rows N] [-seed N]", storeEnv)
	db := dbFlag(fs)
	rows := fs.Int64("rows", odata.DemoRows, "observations to generate")
	seed := fs.Uint64("seed", 1, "random seed (the same seed gives the same data; use another to add more)")
	datasets := fs.Int("datasets", 0, "datasets (default: grows with -rows, dozens)")
	locations := fs.Int("locations", 0, "locations (default: grows with -rows, up to thousands)")
	if err := parseWithDB(fs, args, db); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("generate takes no arguments, got %q", fs.Args())
	}
	cfg := gen.Config{Rows: *rows, Datasets: *datasets, Locations: *locations, Seed: *seed}
	if err := cfg.Validate(); err != nil {
		return err
	}
	g, err := gen.New(cfg)
	if err != nil {
		return err
	}
	return withStore(*db, func(ctx context.Context, store *sqlstore.DB) error {
		start := time.Now()
		bar := newProgressBar(os.Stderr, "generate", "rows")
		res, err := gen.Load(ctx, store, g, func(done int64) { bar.update(done, *rows) })
		bar.finish()
		if err != nil {
			return fmt.Errorf("nothing was added: %w", err)
		}
		fmt.Printf("generated %d datasets, %d locations, %d observations into %s in %s (indexes and statistics included)\n",
			res.Datasets, res.Locations, res.Observations, redact.String(*db), time.Since(start).Round(time.Second))
		return nil
	})
}
