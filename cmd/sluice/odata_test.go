package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeysHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help", "help"} {
		var out bytes.Buffer
		if err := runKeysTo(&out, []string{arg}); err != nil {
			t.Fatalf("keys %s: %v", arg, err)
		}
		for _, want := range []string{"usage: sluice keys", "add NAME", "list", "revoke ID|NAME", "-db DSN"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("keys %s: help lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
	err := runKeysTo(&bytes.Buffer{}, []string{"frobnicate"})
	if err == nil || !strings.Contains(err.Error(), `unknown keys command "frobnicate"`) {
		t.Fatalf("unknown command: %v", err)
	}
}

func TestKeysAddListRevoke(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "k.sqlite")
	var out bytes.Buffer
	if err := runKeysTo(&out, []string{"add", "-db", db, "alice"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	secret := lines[len(lines)-1]
	if len(secret) < 20 || strings.Contains(secret, " ") {
		t.Fatalf("last line of keys add is not a secret: %q", out.String())
	}
	out.Reset()
	if err := runKeysTo(&out, []string{"list", "-db", db}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "alice") || strings.Contains(out.String(), secret) {
		t.Fatalf("list: %q", out.String())
	}
	out.Reset()
	if err := runKeysTo(&out, []string{"revoke", "-db", db, "alice"}); err != nil || !strings.Contains(out.String(), "revoked 1 key") {
		t.Fatalf("revoke: %v %q", err, out.String())
	}
}

func TestBanner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct {
		name, demoKey, db string
		want, not         []string
	}{
		{name: "demo", demoKey: "k123", db: defaultODataDB,
			want: []string{"Demo API key: k123", "curl -s -H x-api-key:'k123' 'http://127.0.0.1:"},
			not:  []string{"keys add", "$KEY"}},
		{name: "own store", db: "postgres://ann:s3cret@db.example/odata",
			want: []string{" keys add -db 'postgres://ann:xxxxx@db.example/odata' NAME", `curl -s -H x-api-key:"$KEY" 'http://127.0.0.1:`},
			not:  []string{"Demo API key", "<API_KEY>", "x-api-key:''", "x-api-key: '", "s3cret"}},
	} {
		var out bytes.Buffer
		s := &odataService{ln: ln, demoKey: c.demoKey}
		s.printTryLines(&out, "/v1/odata/v4", c.db)
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: banner lacks %q:\n%s", c.name, w, out.String())
			}
		}
		for _, n := range c.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("%s: banner has %q:\n%s", c.name, n, out.String())
			}
		}
	}
}

// The banner's commands run as printed: the binary by the path it was
// started with, or by name when it was found on the PATH.
func TestSelfCommand(t *testing.T) {
	for in, want := range map[string]string{
		"sluice": "sluice", "bin/sluice": "bin/sluice", "/usr/local/bin/sluice": "/usr/local/bin/sluice",
		"/tmp/my dir/sluice": "'/tmp/my dir/sluice'", "./it's/sluice": `'./it'\''s/sluice'`,
	} {
		if got := selfCommand(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://ann:s3cret@db/odata":                "postgres://ann:xxxxx@db/odata",
		"host=db user=ann password=s3cret dbname=odata": "host=db user=ann password=xxxxx dbname=odata",
		"host=db password = 's3 cr\\'et' dbname=odata":  "host=db password = xxxxx dbname=odata",
		"sqlite:/tmp/odata.sqlite":                      "sqlite:/tmp/odata.sqlite",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestTrustedProxiesFlag(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "10.0.0.0/8", want: "10.0.0.0/8"},
		{in: "10.1.2.3/8", want: "10.0.0.0/8"},
		{in: "192.0.2.7", want: "192.0.2.7/32"},
		{in: "::ffff:192.0.2.7", want: "192.0.2.7/32"},
		{in: "2001:db8::/32", want: "2001:db8::/32"},
		{in: "fd00::1", want: "fd00::1/128"},
		{in: "10.0.0.0/33", bad: true},
		{in: "proxy.internal", bad: true},
	} {
		p, err := parsePrefix(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && p.String() != tc.want) {
			t.Errorf("%q: %v %v, want %q (error: %v)", tc.in, p, err, tc.want, tc.bad)
		}
	}
	c, err := parseODataFlags("odata", []string{"-trusted-proxies", "10.0.0.0/8, bogus"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startOData(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), `-trusted-proxies: "bogus"`) {
		t.Fatalf("a bad -trusted-proxies: %v", err)
	}
}
