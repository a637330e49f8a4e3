package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisOptions selects how a redis-server is started.
type RedisOptions struct {
	// Password is required from clients (requirepass), or, with User, the
	// password of that ACL user.
	Password string
	// User creates an ACL user with Password and all permissions, and turns
	// the default user off so only User:Password can authenticate.
	User string
	// Unix listens on a unix socket only (no TCP port).
	Unix bool
	// TLS adds a TLS port (TLSAddr) next to the plain one, with certificates
	// from GenerateTLS. Clients must present ClientCert/ClientKey.
	TLS bool
	// SentinelPassword, for StartSentinelGroup only, protects the sentinels
	// themselves (requirepass on each sentinel).
	SentinelPassword string
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	Args []string
}

// Redis is a running redis-server.
type Redis struct {
	Addr     string // host:port, "" if Unix-only
	Socket   string // unix socket path if Unix
	TLSAddr  string // host:port of the TLS listener if TLS
	TLSFiles        // PEM file paths when TLS
	Password string
	User     string
	Dir      string

	bin  string
	args []string
	log  string
	port int
	srv  server
}

func redisBinary(t TB) (string, bool) {
	t.Helper()
	return lookBinary(t, "redis-server", "redis-server")
}

var (
	tlsSupportOnce sync.Once
	tlsSupported   bool
	tlsSupportWhy  string
)

// redisSupportsTLS asks the binary: a build without TLS rejects the
// tls-port directive, a build with it complains that nothing listens.
func redisSupportsTLS(bin string) (bool, string) {
	tlsSupportOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, bin, "--port", "0", "--tls-port", "0", "--save", "", "--appendonly", "no").CombinedOutput()
		s := string(out)
		switch {
		case strings.Contains(s, "not listen anywhere"):
			tlsSupported = true
		default:
			tlsSupportWhy = lastLine(s)
		}
	})
	return tlsSupported, tlsSupportWhy
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// StartRedis starts a redis-server on a free loopback port (or unix socket)
// without persistence, and stops it in Cleanup.
func StartRedis(t TB, o RedisOptions) *Redis {
	t.Helper()
	return startRedis(t, redisConfig{RedisOptions: o})
}

// redisConfig carries the settings only the group helpers use.
type redisConfig struct {
	RedisOptions
	cluster bool // cluster-enabled, with its own bus port
}

func startRedis(t TB, o redisConfig) *Redis {
	t.Helper()
	bin, ok := redisBinary(t)
	if !ok {
		return nil
	}
	r := &Redis{Password: o.Password, User: o.User, Dir: t.TempDir(), bin: bin}
	r.log = filepath.Join(r.Dir, "redis.log")
	if o.TLS {
		if ok, why := redisSupportsTLS(bin); !ok {
			unavailable(t, "%s was built without TLS support (%s); install Debian's redis-server >= 6", bin, why)
			return nil
		}
		r.CACert, r.ClientCert, r.ClientKey = GenerateTLS(t, filepath.Join(r.Dir, "tls"))
	}
	t.Cleanup(r.Kill)
	err := startOnFreePorts(func() error { return r.configure(o) }, r.start)
	if err == nil {
		return r
	}
	t.Fatalf("testenv: start redis-server: %v\nlog tail:\n%s", err, logTail(r.log, 40))
	return nil
}

// configure picks ports and builds the argument list.
func (r *Redis) configure(o redisConfig) error {
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
	}
	if o.Unix {
		r.Socket = filepath.Join(r.Dir, "redis.sock")
		r.Addr = ""
		args = append(args, "--port", "0", "--unixsocket", r.Socket, "--unixsocketperm", "700")
	} else {
		ports, err := FreePorts(3)
		if err != nil {
			return err
		}
		if o.cluster {
			// An explicit bus port: the default port+10000 can be above 65535
			// or taken.
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(r.Dir, "nodes.conf"),
				"--cluster-node-timeout", "5000",
				"--cluster-port", strconv.Itoa(ports[2]))
		}
		r.port = ports[0]
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		args = append(args, "--port", strconv.Itoa(ports[0]))
		if o.TLS {
			r.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
			args = append(args,
				"--tls-port", strconv.Itoa(ports[1]),
				"--tls-cert-file", r.ClientCert,
				"--tls-key-file", r.ClientKey,
				"--tls-ca-cert-file", r.CACert,
				"--tls-auth-clients", "yes",
			)
		}
	}
	switch {
	case o.User != "":
		if o.Password == "" {
			return errors.New("RedisOptions.User needs a Password")
		}
		// Each word is its own argument: redis-server quotes every
		// argument it appends to the config, so a joined string would
		// become a single (bogus) user name.
		args = append(args,
			"--user", o.User, "on", ">"+o.Password, "~*", "&*", "+@all",
			"--user", "default", "off")
	case o.Password != "":
		args = append(args, "--requirepass", o.Password)
	}
	r.args = append(args, o.Args...)
	return nil
}

func (r *Redis) start() error {
	network, addr := "tcp", r.Addr
	if r.Socket != "" {
		network, addr = "unix", r.Socket
	}
	return r.srv.start(ProcessSpec{Name: "redis-server", Bin: r.bin, Args: r.args, Dir: r.Dir, LogPath: r.log},
		func(ctx context.Context) error { return respPing(ctx, network, addr) })
}

// respPing sends a bare PING: any well-formed reply, including an auth
// error, means the server accepts commands.
func respPing(ctx context.Context, network, addr string) error {
	line, err := lineReply(ctx, network, addr, nil, "PING")
	if err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(line, "+PONG"), strings.HasPrefix(line, "-NOAUTH"):
		return nil
	default:
		// -LOADING and friends: up, but not serving yet.
		return fmt.Errorf("PING reply %q", strings.TrimSpace(line))
	}
}

// Kill SIGKILLs the server (and its process group), for failure tests.
// Cleanup calls it too; calling it twice is fine.
func (r *Redis) Kill() { r.srv.kill() }

// Restart starts the server again after Kill, on the same port and with the
// same options. The data set is empty: the helpers run without persistence.
func (r *Redis) Restart(t TB) {
	t.Helper()
	r.srv.restart(t, "redis-server", r.log, r.start)
}

// Options returns go-redis options for this server (plain port or unix
// socket, with credentials), for tests that build their own clients.
func (r *Redis) Options() *goredis.Options {
	o := &goredis.Options{
		Addr:            r.Addr,
		Username:        r.User,
		Password:        r.Password,
		DialTimeout:     2 * time.Second,
		DisableIdentity: true,
	}
	if r.Socket != "" {
		o.Network, o.Addr = "unix", r.Socket
	}
	return o
}

// Client returns a go-redis client for assertions, closed in Cleanup.
func (r *Redis) Client(t TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(r.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Log returns the tail of the server log, for failure messages.
func (r *Redis) Log() string { return logTail(r.log, 40) }

// clientFor returns a short-lived admin client for addr with the group's
// credentials.
func adminClient(addr, user, password string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: addr, Username: user, Password: password,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
	})
}

// infoField extracts one "field:value" line from an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
