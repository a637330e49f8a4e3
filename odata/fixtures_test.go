package odata_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
)

// Loaded stores are templates: a data set is generated and loaded once per
// test process and backend, then copied for every test that reads it (a
// SQLite file copy; PostgreSQL's CREATE DATABASE … TEMPLATE). Loading is
// most of what these tests cost (SQLite in pure Go runs many times slower
// under the race detector), and a copy is what a load would have made:
// each test still has a store of its own to write keys into.

// fixtures holds the templates made so far, and their directory.
var fixtures struct {
	mu   sync.Mutex
	dir  string // SQLite templates; removed after the tests
	sets map[string]*fixture
	orcs map[gen.Config]*oracle
}

// fixture is one loaded template: the SQLite file or the PostgreSQL DSN.
type fixture struct {
	once sync.Once
	src  string
	err  error
}

// withFixtures wraps a TestMain runner so that the SQLite templates go when
// the tests end.
type withFixtures struct{ m testenv.TestingM }

func (w withFixtures) Run() int {
	code := w.m.Run()
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if fixtures.dir != "" {
		_ = os.RemoveAll(fixtures.dir)
	}
	return code
}

// template returns the fixture of cfg on backend kind, loading it on first
// use (other tests asking meanwhile wait for it).
func template(t *testing.T, kind string, cfg gen.Config) *fixture {
	t.Helper()
	fixtures.mu.Lock()
	if fixtures.sets == nil {
		fixtures.sets = map[string]*fixture{}
	}
	name := fmt.Sprintf("%s_r%d_d%d_l%d_s%d", kind, cfg.Rows, cfg.Datasets, cfg.Locations, cfg.Seed)
	f := fixtures.sets[name]
	if f == nil {
		f = &fixture{}
		fixtures.sets[name] = f
	}
	fixtures.mu.Unlock()
	f.once.Do(func() { f.src, f.err = loadTemplate(t, kind, name, cfg) })
	if f.err != nil {
		t.Fatalf("fixture %s: %v", name, f.err)
	}
	return f
}

// loadTemplate loads cfg's data into a new store of kind and closes it.
func loadTemplate(t *testing.T, kind, name string, cfg gen.Config) (string, error) {
	var src, dsn string
	switch kind {
	case "sqlite":
		fixtures.mu.Lock()
		if fixtures.dir == "" {
			d, err := os.MkdirTemp("", "sluice-odata-fixtures-")
			if err != nil {
				fixtures.mu.Unlock()
				return "", err
			}
			fixtures.dir = d
		}
		src = filepath.Join(fixtures.dir, name+".sqlite")
		fixtures.mu.Unlock()
		dsn = "sqlite:" + src
	case "postgres":
		src = testenv.SharedPostgres(t).CreateTemplate(t, "tmpl_"+name)
		dsn = src
	default:
		return "", fmt.Errorf("no templates for backend %q", kind)
	}
	ctx := context.Background()
	db, err := odata.OpenStore(ctx, dsn)
	if err != nil {
		return "", err
	}
	g, err := gen.New(cfg)
	if err == nil {
		_, err = gen.Load(ctx, db, g, nil)
	}
	// Closed before any copy: SQLite folds its WAL into the file, and
	// PostgreSQL copies a template only without connections.
	return src, errors.Join(err, db.Close())
}

// cloneSQLite copies the template file to a new store in t's directory.
func cloneSQLite(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "odata.sqlite")
	for _, suffix := range []string{"", "-wal"} {
		in, err := os.Open(src + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(dst + suffix)
		if err == nil {
			_, err = io.Copy(out, in)
			err = errors.Join(err, out.Close())
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return "sqlite:" + dst
}

// cachedOracle is newOracle, computed once per data set: tests only read it.
func cachedOracle(t *testing.T, cfg gen.Config) *oracle {
	t.Helper()
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if o := fixtures.orcs[cfg]; o != nil {
		return o
	}
	if fixtures.orcs == nil {
		fixtures.orcs = map[gen.Config]*oracle{}
	}
	o := newOracle(t, cfg)
	fixtures.orcs[cfg] = o
	return o
}
