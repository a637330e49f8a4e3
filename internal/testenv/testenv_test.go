package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(WithSharedStop(m))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRedisModes(t *testing.T) {
	tests := []struct {
		name string
		opts RedisOptions
	}{
		{"plain", RedisOptions{}},
		{"requirepass", RedisOptions{Password: "s3cret"}},
		{"acl-user", RedisOptions{User: "alice", Password: "wonder"}},
		{"unix", RedisOptions{Unix: true}},
		{"tls", RedisOptions{TLS: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			r := StartRedis(t, tc.opts)
			c := r.Client(t)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET through convenience client: %v", err)
			}
			if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
				t.Fatalf("GET = %q, %v", got, err)
			}
			switch {
			case tc.opts.Unix:
				if r.Addr != "" || r.Socket == "" {
					t.Fatalf("unix: Addr=%q Socket=%q", r.Addr, r.Socket)
				}
			case tc.opts.Password != "":
				// Without credentials (or as the default user) the server refuses.
				anon := goredis.NewClient(&goredis.Options{Addr: r.Addr, MaxRetries: -1, DisableIdentity: true})
				defer anon.Close()
				if err := anon.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
					t.Fatalf("unauthenticated GET: err=%v, want NOAUTH", err)
				}
				if tc.opts.User != "" {
					def := goredis.NewClient(&goredis.Options{Addr: r.Addr, Password: tc.opts.Password, MaxRetries: -1, DisableIdentity: true})
					defer def.Close()
					if err := def.Ping(ctx).Err(); err == nil {
						t.Fatalf("default user authenticated with the ACL user's password")
					}
				}
			case tc.opts.TLS:
				tc := goredis.NewClient(&goredis.Options{Addr: r.TLSAddr, TLSConfig: r.TLSConfig(t), DisableIdentity: true})
				defer tc.Close()
				if got, err := tc.Get(ctx, "k").Result(); err != nil || got != "v" {
					t.Fatalf("GET over TLS = %q, %v", got, err)
				}
				// Without a client certificate the handshake is refused.
				cfg := r.TLSConfig(t)
				cfg.Certificates = nil
				nocert := goredis.NewClient(&goredis.Options{Addr: r.TLSAddr, TLSConfig: cfg, MaxRetries: -1, DisableIdentity: true})
				defer nocert.Close()
				if err := nocert.Ping(ctx).Err(); err == nil {
					t.Fatalf("TLS without client certificate was accepted")
				}
			}
		})
	}
}

func TestRedisKillRestart(t *testing.T) {
	ctx := ctxT(t)
	r := StartRedis(t, RedisOptions{Password: "pw"})
	addr := r.Addr
	c := r.Client(t)
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatalf("PING after Kill succeeded")
	}
	r.Restart(t)
	if r.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, r.Addr)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := c.Exists(ctx, "before").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS before = %d, %v; the helpers run without persistence", n, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	ctx := ctxT(t)
	g := StartSentinelGroup(t, RedisOptions{Password: "pw", SentinelPassword: "spw"})
	fc := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: g.MasterName, SentinelAddrs: g.Sentinels, SentinelPassword: g.SentinelPassword,
		Password: "pw", DisableIdentity: true,
	})
	defer fc.Close()
	if err := fc.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatalf("SET through sentinel: %v", err)
	}
	old := g.Primary.Addr
	g.Failover(t)
	if g.Primary.Addr == old || g.Replica.Addr != old {
		t.Fatalf("after failover Primary=%s Replica=%s, old primary %s", g.Primary.Addr, g.Replica.Addr, old)
	}
	role, err := g.Primary.Client(t).Do(ctx, "ROLE").Slice()
	if err != nil || role[0] != "master" {
		t.Fatalf("ROLE of new primary = %v, %v", role, err)
	}
	// The failover client follows the switch; writes can fail for a moment.
	if err := pollUntil(10*time.Second, 50*time.Millisecond, func() error { return fc.Set(ctx, "b", "2", 0).Err() }); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got, err := g.Primary.Client(t).Get(ctx, "a").Result(); err != nil || got != "1" {
		t.Fatalf("replicated key a on new primary = %q, %v", got, err)
	}
	// The group is whole again: a second failover returns to the first node.
	g.Failover(t)
	if g.Primary.Addr != old {
		t.Fatalf("second failover: Primary=%s, want %s", g.Primary.Addr, old)
	}
	if err := pollUntil(10*time.Second, 50*time.Millisecond, func() error { return fc.Set(ctx, "c", "3", 0).Err() }); err != nil {
		t.Fatalf("SET after second failover: %v", err)
	}
}

func TestRedisCluster(t *testing.T) {
	ctx := ctxT(t)
	c := StartRedisCluster(t, 3)
	cc := c.Client(t)
	const keys = 200
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	var total int64
	for _, n := range c.Nodes {
		size, err := n.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE %s: %v", n.Addr, err)
		}
		if size == 0 {
			t.Errorf("primary %s holds no keys", n.Addr)
		}
		total += size
	}
	if total != keys {
		t.Fatalf("keys across primaries = %d, want %d", total, keys)
	}
}

func TestMemcached(t *testing.T) {
	m := StartMemcached(t)
	c := memcache.New(m.Addr)
	defer c.Close()
	if err := c.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatalf("set: %v", err)
	}
	if it, err := c.Get("k"); err != nil || string(it.Value) != "v" {
		t.Fatalf("get: %v", err)
	}
	m.Kill()
	if err := c.Ping(); err == nil {
		t.Fatalf("ping after Kill succeeded")
	}
	m.Restart(t)
	if err := c.Ping(); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
	if _, err := c.Get("k"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get after Restart: %v, want a miss", err)
	}
}

func TestMemcachedTLS(t *testing.T) {
	m := StartMemcachedWith(t, MemcachedOptions{TLS: true})
	cfg := m.TLSConfig(t)
	c := memcache.New(m.Addr)
	c.DialContext = (&tls.Dialer{Config: cfg}).DialContext
	defer c.Close()
	if err := c.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatalf("set over TLS: %v", err)
	}
	plain := memcache.New(m.Addr)
	plain.Timeout = time.Second
	defer plain.Close()
	if _, err := plain.Get("k"); err == nil {
		t.Fatalf("plain-text get against a TLS memcached succeeded")
	}
}

func TestPostgres(t *testing.T) {
	ctx := ctxT(t)
	pg := StartPostgres(t)
	a := pg.CreateDatabase(t, "Test Postgres")
	b := pg.CreateDatabase(t, "Test Postgres")
	if a == b {
		t.Fatalf("CreateDatabase returned the same DSN twice: %s", a)
	}
	for _, dsn := range []string{a, b} {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect %s: %v", dsn, err)
		}
		var n int
		if _, err := c.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
			t.Fatalf("create table in %s: %v", dsn, err)
		}
		if err := c.QueryRow(ctx, "INSERT INTO t VALUES (41) RETURNING x+1").Scan(&n); err != nil || n != 42 {
			t.Fatalf("insert: %d, %v", n, err)
		}
		var fsync string
		if err := c.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
			t.Fatalf("fsync = %q, %v", fsync, err)
		}
		c.Close(ctx)
	}
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(pg.Dir, "data"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid == 0 {
			t.Fatalf("data directory is owned by root; the server must run unprivileged")
		}
	}
}

func TestSharedPostgres(t *testing.T) {
	ctx := ctxT(t)
	p1 := SharedPostgres(t)
	p2 := SharedPostgres(t)
	if p1 != p2 {
		t.Fatalf("SharedPostgres started two servers")
	}
	dsn := p1.CreateDatabase(t, t.Name())
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var db string
	if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != "testsharedpostgres" {
		t.Fatalf("current_database = %q, %v", db, err)
	}
}

// A template's rows are in each clone, a clone's writes stay in it, and a
// clone is dropped with its test while the template lives on.
func TestCloneDatabase(t *testing.T) {
	ctx := ctxT(t)
	pg := SharedPostgres(t)
	tmpl := pg.CreateTemplate(t, "tmpl clone test")
	exec := func(dsn, sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(dsn string) int {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(tmpl, "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)")
	var clones []string
	t.Run("a", func(t *testing.T) {
		a := pg.CloneDatabase(t, "clone", tmpl)
		exec(a, "INSERT INTO t VALUES (3)")
		if n := count(a); n != 3 {
			t.Fatalf("clone a holds %d rows, want 3", n)
		}
		clones = append(clones, a)
	})
	b := pg.CloneDatabase(t, "clone b", tmpl)
	if n := count(b); n != 2 {
		t.Fatalf("clone b holds %d rows, want the template's 2", n)
	}
	if c, err := pgx.Connect(ctx, clones[0]); err == nil {
		c.Close(ctx)
		t.Fatalf("clone a outlived its test")
	}
	if n := count(tmpl); n != 2 {
		t.Fatalf("the template holds %d rows after the clones, want 2", n)
	}
}

func TestGenerateTLS(t *testing.T) {
	ca, cert, key := GenerateTLS(t, t.TempDir(), "redis.test", "10.1.2.3")
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		t.Fatalf("key pair: %v", err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA not PEM")
	}
	certPEM, _ := os.ReadFile(cert)
	blk, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host  string
		usage x509.ExtKeyUsage
	}{
		{"localhost", x509.ExtKeyUsageServerAuth},
		{"127.0.0.1", x509.ExtKeyUsageServerAuth},
		{"redis.test", x509.ExtKeyUsageServerAuth},
		{"10.1.2.3", x509.ExtKeyUsageServerAuth},
		{"", x509.ExtKeyUsageClientAuth},
	} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("verify host=%q usage=%v: %v", tc.host, tc.usage, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: pool}); err == nil {
		t.Errorf("certificate verified for a host it was not issued for")
	}
}

// recordTB records how a missing binary is reported.
type recordTB struct {
	fatal, skip string
}

func (r *recordTB) Helper()                   {}
func (r *recordTB) Cleanup(func())            {}
func (r *recordTB) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...) }
func (r *recordTB) Skipf(f string, a ...any)  { r.skip = fmt.Sprintf(f, a...) }
func (r *recordTB) Logf(string, ...any)       {}
func (r *recordTB) TempDir() string           { return os.TempDir() }

func TestMissingBinary(t *testing.T) {
	for _, tc := range []struct {
		require  string
		wantSkip bool
	}{{"", true}, {"1", false}} {
		t.Run("require="+tc.require, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.require)
			rec := &recordTB{}
			if _, ok := lookBinary(rec, "sluice-no-such-server", "sluice-pkg"); ok {
				t.Fatal("found a binary that does not exist")
			}
			msg := rec.skip
			if !tc.wantSkip {
				msg = rec.fatal
			}
			if (rec.skip != "") != tc.wantSkip || (rec.fatal != "") == tc.wantSkip {
				t.Fatalf("skip=%q fatal=%q, want skip=%v", rec.skip, rec.fatal, tc.wantSkip)
			}
			if !strings.Contains(msg, "sluice-no-such-server") || !strings.Contains(msg, "apt-get install sluice-pkg") {
				t.Fatalf("message does not name binary and package: %q", msg)
			}
		})
	}
}
