package memcache

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func TestValidate(t *testing.T) {
	mod := func(f func(*Options)) Options {
		o := DefaultOptions()
		o.HostPorts = []string{"127.0.0.1:11211"}
		f(&o)
		return o
	}
	tests := []struct {
		name, wantErr string
		opts          Options
	}{
		{"host ports", "", mod(func(*Options) {})},
		{"srv", "", mod(func(o *Options) { o.HostPorts, o.SRV = nil, "_memcache._tcp.example.com" })},
		{"both", "Both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set", mod(func(o *Options) { o.SRV = "_memcache._tcp.example.com" })},
		{"neither", "neither MEMCACHE_HOST_PORT nor MEMCACHE_SRV is set", mod(func(o *Options) { o.HostPorts = nil })},
		{"bad host", `memcache host "nohost"`, mod(func(o *Options) { o.HostPorts = []string{"nohost"} })},
		{"bad srv", "not of the form _service._proto.name", mod(func(o *Options) { o.HostPorts, o.SRV = nil, "memcache.example.com" })},
		{"negative refresh", "SRV refresh", mod(func(o *Options) { o.SRVRefresh = -time.Second })},
		{"idle conns", "max idle connections", mod(func(o *Options) { o.MaxIdleConns = 0 })},
		{"timeout", "timeout must be positive", mod(func(o *Options) { o.Timeout = 0 })},
		{"workers", "workers", mod(func(o *Options) { o.Workers = 0 })},
		{"queue", "queue size", mod(func(o *Options) { o.QueueSize = 0 })},
		{"drain", "drain timeout", mod(func(o *Options) { o.DrainTimeout = 0 })},
		{"health", "health check interval", mod(func(o *Options) { o.HealthCheckInterval = 0 })},
		{"cert without key", "set together", mod(func(o *Options) { o.TLSCert = "c.pem" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseSRVName(t *testing.T) {
	tests := []struct {
		in   string
		want srvName
		ok   bool
	}{
		{"_memcache._tcp.example.com", srvName{"memcache", "tcp", "example.com"}, true},
		{"_mc._udp.a.", srvName{"mc", "udp", "a."}, true},
		{"memcache._tcp.example.com", srvName{}, false},
		{"_memcache.tcp.example.com", srvName{}, false},
		{"__tcp.example.com", srvName{}, false},
		{"_memcache._tcp", srvName{}, false},
		{"_memcache._tcp..", srvName{}, false},
		{"_mem cache._tcp.x", srvName{}, false},
	}
	for _, tc := range tests {
		got, err := parseSRVName(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSRVName(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseSRVName(f *testing.F) {
	for _, s := range []string{"_memcache._tcp.example.com", "_a._b.c", "_._.", "__.", "_a._b.\x00", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSRVName(s)
		if err != nil {
			return
		}
		if n.service == "" || n.proto == "" || n.name == "" || "_"+n.service+"._"+n.proto+"."+n.name != s {
			t.Fatalf("parseSRVName(%q) = %+v does not rebuild the input", s, n)
		}
	})
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name, key, wantErr string
	}{
		{"plain", "domain_key_value_1700000000", ""},
		{"250 bytes", strings.Repeat("k", 250), ""},
		{"utf-8", "probe_k_ünïcode_1", ""},
		{"251 bytes", strings.Repeat("k", 251), "(251 bytes) is over the 250-byte limit"},
		{"empty", "", "empty"},
		{"space", "a b", "whitespace ' ' at byte 1"},
		{"tab", "a\tb", `whitespace '\t' at byte 1`},
		{"newline", "ab\n", `whitespace '\n' at byte 2`},
		{"nul", "a\x00", "control character 0x00 at byte 1"},
		{"del", "\x7fa", "control character 0x7f at byte 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateKey(tc.key)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			// Keys hold descriptor values: an error names a key by hash.
			if len(tc.key) > 1 && strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %v quotes the key", err)
			}
		})
	}
}

// FuzzValidateKey checks ValidateKey against what memcached's text protocol
// (and gomemcache) accept: 1..250 bytes, none of them <= ' ' or DEL.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a b", strings.Repeat("x", 250), strings.Repeat("x", 251), "\x7f", "é", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		legal := len(key) > 0 && len(key) <= 250
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] == 0x7f {
				legal = false
			}
		}
		if err := ValidateKey(key); (err == nil) != legal {
			t.Fatalf("ValidateKey(%q) = %v, legal=%v", key, err, legal)
		}
	})
}

func TestParseCounter(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"7   ", 7, true}, {"18446744073709551615", 1<<64 - 1, true},
		{"", 0, false}, {"-1", 0, false}, {"abc", 0, false}, {" 7", 0, false}, {"18446744073709551616", 0, false},
	}
	for _, tc := range tests {
		got, err := parseCounter([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseCounter(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseCounter(f *testing.F) {
	for _, s := range []string{"0", "12 ", "x", "99999999999999999999", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		n, err := parseCounter(v)
		if err != nil {
			return
		}
		canon := strings.TrimLeft(strings.TrimRight(string(v), " "), "0")
		if canon == "" {
			canon = "0"
		}
		if strconv.FormatUint(n, 10) != canon {
			t.Fatalf("parseCounter(%q) = %d", v, n)
		}
	})
}

func TestExpiration(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	b := &Backend{now: func() time.Time { return now }}
	tests := []struct {
		ttl  time.Duration
		want int32
	}{
		{time.Second, 1},
		{1500 * time.Millisecond, 2}, // never earlier than asked
		{60 * time.Second, 60},
		{30 * 24 * time.Hour, 2592000},                   // the last relative value
		{30*24*time.Hour + time.Second, 1_802_592_001},   // absolute from here on
		{365 * 24 * time.Hour, 1_800_000_000 + 31536000}, // YEAR windows
	}
	for _, tc := range tests {
		if got := b.expiration(tc.ttl); got != tc.want {
			t.Errorf("expiration(%v) = %d, want %d", tc.ttl, got, tc.want)
		}
	}
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false}, {memcache.ErrCacheMiss, false}, {memcache.ErrNotStored, false}, {memcache.ErrServerError, false},
		{memcache.ErrNoServers, true}, {&memcache.ConnectTimeoutError{}, true},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v", tc.err, got)
		}
	}
}
