package redis

import (
	"crypto/tls"
	"github.com/sluicehq/sluice/internal/tlsclient"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestValidate(t *testing.T) {
	mod := func(f func(*Options)) Options {
		o := DefaultOptions()
		f(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" = valid
	}{
		{"defaults", DefaultOptions(), ""},
		{"tcp single", mod(func(o *Options) { o.SocketType, o.URL = "TCP", "127.0.0.1:6379" }), ""},
		{"type case-insensitive", mod(func(o *Options) { o.Type = "SINGLE" }), ""},
		{"bad type", mod(func(o *Options) { o.Type = "ring" }), "Unrecognized redis type ring"},
		{"bad socket type", mod(func(o *Options) { o.SocketType = "udp" }), `Unrecognized redis socket type "udp"`},
		{"empty url", mod(func(o *Options) { o.URL = " " }), "redis URL is empty"},
		{"sentinel one part", mod(func(o *Options) { o.Type, o.URL = "sentinel", "mymaster" }),
			"Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>"},
		{"sentinel ok", mod(func(o *Options) { o.Type, o.URL = "Sentinel", "mymaster,127.0.0.1:26379,127.0.0.1:26380" }), ""},
		{"sentinel ignores unix socket type", mod(func(o *Options) { o.Type, o.SocketType, o.URL = "sentinel", "unix", "m,127.0.0.1:1" }), ""},
		{"cluster ok", mod(func(o *Options) { o.Type, o.URL = "cluster", "127.0.0.1:7000,127.0.0.1:7001" }), ""},
		{"cluster bad addr", mod(func(o *Options) { o.Type, o.URL = "cluster", "127.0.0.1:7000,nohost" }), `redis address "nohost"`},
		{"single two addrs", mod(func(o *Options) { o.SocketType, o.URL = "tcp", "a:1,b:2" }), "single takes one address"},
		{"tcp without port", mod(func(o *Options) { o.SocketType, o.URL = "tcp", "localhost" }), "missing port"},
		{"redis url", mod(func(o *Options) { o.SocketType, o.URL = "tcp", "redis://u:p@127.0.0.1:6379/2" }), ""},
		{"redis url bad db", mod(func(o *Options) { o.SocketType, o.URL = "tcp", "redis://127.0.0.1:6379/x" }), "is not a number"},
		{"pool size", mod(func(o *Options) { o.PoolSize = 0 }), "pool size must be at least 1"},
		{"negative dial timeout", mod(func(o *Options) { o.DialTimeout = -time.Second }), "dial timeout"},
		{"health interval", mod(func(o *Options) { o.HealthCheckActiveConnection, o.HealthCheckInterval = true, 0 }), "health check interval"},
		{"startup initial", mod(func(o *Options) { o.StartupInitialInterval = 0 }), "initial interval must be positive"},
		{"startup max below initial", mod(func(o *Options) { o.StartupMaxInterval = time.Millisecond }), "below the initial interval"},
		{"startup elapsed negative", mod(func(o *Options) { o.StartupMaxElapsed = -1 }), "max elapsed"},
		{"cert without key", mod(func(o *Options) { o.TLSCert = "c.pem" }), "set together"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	tests := []struct {
		typ, socket, url string
		master           string
		want             []endpoint
	}{
		{"single", "unix", "/tmp/r.sock", "", []endpoint{{addr: "/tmp/r.sock"}}},
		{"single", "tcp", "redis://alice:pw@127.0.0.1:6379/3", "", []endpoint{{addr: "127.0.0.1:6379", user: "alice", password: "pw", hasAuth: true, db: 3}}},
		{"single", "tcp", "redis://secret@127.0.0.1:6379", "", []endpoint{{addr: "127.0.0.1:6379", password: "secret", hasAuth: true}}},
		{"sentinel", "tcp", "m, 127.0.0.1:1 ,127.0.0.1:2", "m", []endpoint{{addr: "127.0.0.1:1"}, {addr: "127.0.0.1:2"}}},
		{"cluster", "tcp", "[::1]:7000,127.0.0.1:7001", "", []endpoint{{addr: "[::1]:7000"}, {addr: "127.0.0.1:7001"}}},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			set, err := Options{Type: tc.typ, SocketType: tc.socket, URL: tc.url}.endpoints()
			if err != nil {
				t.Fatal(err)
			}
			if set.masterName != tc.master || len(set.nodes) != len(tc.want) {
				t.Fatalf("got %+v", set)
			}
			for i := range tc.want {
				if set.nodes[i] != tc.want[i] {
					t.Errorf("node %d = %+v, want %+v", i, set.nodes[i], tc.want[i])
				}
			}
		})
	}
}

func TestSplitAuthAndMask(t *testing.T) {
	for _, tc := range []struct{ in, user, pass string }{
		{"pw", "", "pw"}, {"alice:pw", "alice", "pw"}, {"alice:p:w", "alice", "p:w"}, {"", "", ""},
	} {
		if u, p := splitAuth(tc.in); u != tc.user || p != tc.pass {
			t.Errorf("splitAuth(%q) = %q,%q", tc.in, u, p)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"m,redis://u:p@h:1,redis://x@h:2,h:3", "m,redis://*****@h:1,redis://*****@h:2,h:3"},
		{"127.0.0.1:6379", "127.0.0.1:6379"},
	} {
		if got := maskURL(tc.in); got != tc.want {
			t.Errorf("maskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestBuildTLS runs real handshakes against a Go TLS listener whose
// certificate names only "other.test", so the name check is what differs.
func TestBuildTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := testenv.GenerateTLS(t, filepath.Join(dir, "good"), "other.test")
	otherCA, _, _ := testenv.GenerateTLS(t, filepath.Join(dir, "other"))
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()

	tests := []struct {
		name       string
		ca         string
		serverName string
		skip       bool
		ok         bool
	}{
		{"name matches", ca, "other.test", false, true},
		{"name differs", ca, "wrong.test", false, false},
		{"name differs, skip hostname", ca, "wrong.test", true, true},
		{"unknown CA, skip hostname", otherCA, "wrong.test", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tlsclient.Config(tc.ca, "", "", tc.skip)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ServerName = tc.serverName
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
			c, err := d.Dial("tcp", ln.Addr().String())
			if c != nil {
				c.Close()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("handshake err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func FuzzEndpoints(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6379", "m,127.0.0.1:1,127.0.0.1:2", "redis://u:p@h:1/2", "redis://@:", "redis://%zz@h:1",
		"/var/run/x.sock", ",,", "redis://[::1]:1", "a:1,redis://u:p@b:2",
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	types := []string{"single", "sentinel", "cluster"}
	f.Fuzz(func(t *testing.T, url string, typ uint8) {
		o := DefaultOptions()
		o.Type, o.SocketType, o.URL = types[int(typ)%3], "tcp", url
		set, err := o.endpoints()
		if err != nil {
			return
		}
		if len(set.nodes) == 0 {
			t.Fatalf("no error and no nodes for %q", url)
		}
		for _, n := range set.nodes {
			if _, _, err := net.SplitHostPort(n.addr); err != nil {
				t.Fatalf("accepted %q with address %q: %v", url, n.addr, err)
			}
		}
		if o.Type == "sentinel" && set.masterName == "" {
			t.Fatalf("sentinel without master name accepted: %q", url)
		}
		// Masking never leaks a password of a redis:// address.
		for _, n := range set.nodes {
			if n.password != "" && strings.Contains(maskURL(url), "@") && strings.Contains(maskURL(url), ":"+n.password+"@") {
				t.Fatalf("maskURL(%q) leaks the password", url)
			}
		}
	})
}
