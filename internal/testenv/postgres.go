package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresUser is the unprivileged account the server runs as when the
// tests run as root (PostgreSQL refuses to run as root).
const PostgresUser = "sluicetest"

// Postgres is a running PostgreSQL server with trust authentication on
// 127.0.0.1, superuser "postgres".
type Postgres struct {
	DSN  string // postgres://postgres@127.0.0.1:<port>/postgres?sslmode=disable
	Port int
	Dir  string // data directory parent; removed on stop

	initdb, postgres string
	cred             *syscall.Credential
	log              string
	stopOnce         sync.Once
	mu               sync.Mutex
	p                *Process
	dbSeq            int
}

// StartPostgres runs initdb and starts postgres (fsync off) as an
// unprivileged user; it returns when the server accepts connections and
// stops it in Cleanup.
func StartPostgres(t TB) *Postgres {
	t.Helper()
	pg := newPostgres(t)
	if pg == nil {
		return nil
	}
	t.Cleanup(pg.stop)
	if err := pg.boot(); err != nil {
		t.Fatalf("testenv: start postgres: %v\nlog tail:\n%s", err, logTail(pg.log, 40))
		return nil
	}
	return pg
}

var shared struct {
	mu  sync.Mutex
	pg  *Postgres
	err error
}

// SharedPostgres returns one server per test process, started on first use.
// Tests still get their own database with CreateDatabase. The server is not
// tied to any test's Cleanup: stop it with StopShared, most easily by
// wrapping the TestMain runner in WithSharedStop. If nobody stops it, it
// dies with the test process (parent-death signal) and leaves its temp dir.
func SharedPostgres(t TB) *Postgres {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg != nil {
		return shared.pg
	}
	if shared.err != nil {
		t.Fatalf("testenv: shared postgres failed to start earlier: %v", shared.err)
		return nil
	}
	pg := newPostgres(t)
	if pg == nil {
		return nil
	}
	if err := pg.boot(); err != nil {
		shared.err = err
		tail := logTail(pg.log, 40)
		pg.stop()
		t.Fatalf("testenv: start shared postgres: %v\nlog tail:\n%s", err, tail)
		return nil
	}
	shared.pg = pg
	return pg
}

// StopShared stops the server SharedPostgres started, if any.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg != nil {
		shared.pg.stop()
		shared.pg = nil
	}
}

// TestingM is what TestMain runners (testing.M, goleak) need.
type TestingM interface{ Run() int }

type stopAfter struct{ m TestingM }

func (s stopAfter) Run() int {
	code := s.m.Run()
	StopShared()
	return code
}

// WithSharedStop wraps m so that shared servers stop right after the tests,
// before goleak looks for leaked goroutines:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.WithSharedStop(m)) }
func WithSharedStop(m TestingM) TestingM { return stopAfter{m} }

// newPostgres finds the binaries and prepares the directory and user.
func newPostgres(t TB) *Postgres {
	t.Helper()
	initdb, postgres, ok := postgresBinaries()
	if !ok {
		unavailable(t, "PostgreSQL server binaries initdb and postgres not found on PATH or in /usr/lib/postgresql/<v>/bin; install them with `apt-get install postgresql`")
		return nil
	}
	pg := &Postgres{initdb: initdb, postgres: postgres}
	if os.Geteuid() == 0 {
		cred, err := ensureUnprivilegedUser()
		if err != nil {
			t.Fatalf("testenv: postgres: %v", err)
			return nil
		}
		pg.cred = cred
	}
	// Not under t.TempDir(): that is 0700 root, which the server user
	// cannot enter, and the shared server outlives the first test.
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		t.Fatalf("testenv: postgres temp dir: %v", err)
		return nil
	}
	pg.Dir = dir
	pg.log = filepath.Join(dir, "postgres.log")
	if pg.cred != nil {
		if err := os.Chown(dir, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			t.Fatalf("testenv: chown postgres dir: %v", err)
			return nil
		}
	}
	return pg
}

// postgresBinaries honours PATH first, then the highest installed version.
func postgresBinaries() (initdb, postgres string, ok bool) {
	i, err1 := exec.LookPath("initdb")
	p, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return i, p, true
	}
	for _, d := range postgresBinDirs() {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if fileExists(i) && fileExists(p) {
			return i, p, true
		}
	}
	return "", "", false
}

var userMu sync.Mutex

// ensureUnprivilegedUser creates PostgresUser if needed. Another test
// process may create it at the same moment, so a failed useradd is followed
// by a second lookup before it counts as an error.
func ensureUnprivilegedUser() (*syscall.Credential, error) {
	userMu.Lock()
	defer userMu.Unlock()
	u, err := user.Lookup(PostgresUser)
	if err != nil {
		out, addErr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", PostgresUser).CombinedOutput()
		if u, err = user.Lookup(PostgresUser); err != nil {
			return nil, fmt.Errorf("create user %s: %v: %s: %w", PostgresUser, addErr, strings.TrimSpace(string(out)), err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", PostgresUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", PostgresUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// pgEnv drops PG* variables that would redirect initdb or the server.
func pgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func (pg *Postgres) boot() error {
	data := filepath.Join(pg.Dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pg.initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "-N")
	cmd.Dir = pg.Dir
	cmd.Env = pgEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return err
		}
		pg.Port = port
		pg.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		args := []string{
			"-D", data, "-p", strconv.Itoa(port), "-k", pg.Dir,
			"-c", "listen_addresses=127.0.0.1",
			// Durability is irrelevant for throwaway test data.
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=200", "-c", "shared_buffers=64MB",
			"-c", "logging_collector=off", "-c", "log_min_messages=warning",
		}
		var p *Process
		p, err = StartProcess(ProcessSpec{Name: "postgres", Bin: pg.postgres, Args: args, Dir: pg.Dir, LogPath: pg.log, Cred: pg.cred, Env: pgEnv()})
		if err != nil {
			return err
		}
		pg.mu.Lock()
		pg.p = p
		pg.mu.Unlock()
		err = waitReady(p, func(ctx context.Context) error {
			c, err := pgx.Connect(ctx, pg.DSN)
			if err != nil {
				return err
			}
			return c.Close(ctx)
		})
		if err == nil {
			return nil
		}
		p.Kill()
		if !errors.Is(err, ErrExited) {
			return err
		}
	}
	return err
}

// Stop shuts the server down now, for tests of a database outage (Cleanup
// would stop it anyway). Not for the shared server.
func (pg *Postgres) Stop() { pg.stop() }

// stop shuts the server down (fast shutdown, so shared memory is released)
// and removes its directory.
func (pg *Postgres) stop() {
	pg.stopOnce.Do(func() {
		pg.mu.Lock()
		p := pg.p
		pg.mu.Unlock()
		if p != nil {
			// SIGINT to the postmaster only: a group-wide SIGINT would just
			// cancel queries in the backends.
			if !p.Exited() {
				_ = p.Signal(syscall.SIGINT)
				select {
				case <-p.Done():
				case <-time.After(10 * time.Second):
				}
			}
			p.Kill()
		}
		_ = os.RemoveAll(pg.Dir)
	})
}

var dbNameRE = regexp.MustCompile(`[^a-z0-9_]+`)

// CreateDatabase creates a fresh database and returns its DSN. The name is
// lower-cased and reduced to [a-z0-9_]; a suffix is added when it exists
// already (for example with -count=2). It is dropped in t's Cleanup.
func (pg *Postgres) CreateDatabase(t TB, name string) string {
	t.Helper()
	return pg.createDatabase(t, name, "", true)
}

// CreateTemplate is CreateDatabase for a database that outlives the test:
// a fixture loaded once and copied by CloneDatabase for each test that
// reads it. It lives as long as the server. Close every connection to it
// before it is cloned.
func (pg *Postgres) CreateTemplate(t TB, name string) string {
	t.Helper()
	return pg.createDatabase(t, name, "", false)
}

// CloneDatabase is CreateDatabase with a copy of template (a database
// CreateTemplate made, named by its DSN) as its content: PostgreSQL copies
// the files, much faster than loading the data again.
func (pg *Postgres) CloneDatabase(t TB, name, template string) string {
	t.Helper()
	u, err := url.Parse(template)
	if err != nil {
		t.Fatalf("testenv: template DSN %q: %v", template, err)
		return ""
	}
	return pg.createDatabase(t, name, strings.TrimPrefix(u.Path, "/"), true)
}

func (pg *Postgres) createDatabase(t TB, name, template string, drop bool) string {
	t.Helper()
	base := dbNameRE.ReplaceAllString(strings.ToLower(name), "_")
	base = strings.Trim(base, "_")
	if base == "" {
		base = "db"
	}
	if len(base) > 50 {
		base = base[:50]
	}
	if base[0] >= '0' && base[0] <= '9' {
		base = "d" + base
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatalf("testenv: connect postgres: %v", err)
		return ""
	}
	defer admin.Close(ctx)
	dbName := base
	for i := 0; ; i++ {
		if i > 0 {
			pg.mu.Lock()
			pg.dbSeq++
			dbName = fmt.Sprintf("%s_%d", base, pg.dbSeq)
			pg.mu.Unlock()
		}
		create := "CREATE DATABASE " + pgx.Identifier{dbName}.Sanitize()
		if template != "" {
			create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		}
		_, err = admin.Exec(ctx, create)
		var pgErr *pgconn.PgError
		if err == nil {
			break
		}
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" && i < 100 { // duplicate_database
			continue
		}
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && ctx.Err() == nil {
			// object_in_use: a closed pool's backends to the template
			// are still exiting.
			i--
			time.Sleep(10 * time.Millisecond)
			continue
		}
		t.Fatalf("testenv: create database %s: %v", dbName, err)
		return ""
	}
	if !drop {
		return pg.dsnOf(t, dbName)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, pg.DSN)
		if err != nil {
			return // the server is gone; nothing to drop
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop database %s: %v", dbName, err)
		}
	})
	return pg.dsnOf(t, dbName)
}

// dsnOf is the DSN of database dbName on pg.
func (pg *Postgres) dsnOf(t TB, dbName string) string {
	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatalf("testenv: parse DSN: %v", err)
		return ""
	}
	u.Path = "/" + dbName
	return u.String()
}
