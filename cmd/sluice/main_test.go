package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/server"
)

// captureStdout runs fn with os.Stdout redirected.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	runErr := fn()
	os.Stdout = old
	w.Close()
	var b bytes.Buffer
	io.Copy(&b, r)
	return b.String(), runErr
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	os.WriteFile(bad, []byte("domain: e\ndescriptors:\n  - {key: a, rate_limit: {unit: eon, requests_per_unit: 1}}\n"), 0o644)
	out, err := captureStdout(t, func() error { return runConfigCheck([]string{good}) })
	if err != nil || !strings.Contains(out, "ok: 1 file(s), domains [d]") {
		t.Fatalf("good: %v %q", err, out)
	}
	algo := filepath.Join(dir, "algo.yaml")
	os.WriteFile(algo, []byte("domain: f\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}}\n"), 0o644)
	out, err = captureStdout(t, func() error { return runConfigCheck([]string{algo}) })
	if want := "  f.a: unit=SECOND requests_per_unit=2, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 4\n"; err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("algorithm: %v %q", err, out)
	}
	lease := filepath.Join(dir, "lease.yaml")
	os.WriteFile(lease, []byte("domain: g\ndescriptors:\n  - {key: a, rate_limit: {unit: hour, requests_per_unit: 2, counting: lease}}\n"), 0o644)
	out, err = captureStdout(t, func() error { return runConfigCheck([]string{lease}) })
	if want := "  g.a: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false, counting: lease\n"; err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("counting: %v %q", err, out)
	}
	_, err = captureStdout(t, func() error { return runConfigCheck([]string{good, bad}) })
	if err == nil || err.Error() != "1 of 2 file(s) broken" {
		t.Fatalf("bad: %v", err)
	}
	if err := runConfigCheck(nil); err == nil {
		t.Fatal("no files accepted")
	}
}

// startServer runs a memory-backed rate limit server with one rule file; env
// adds settings.
func startServer(t *testing.T, env map[string]string) *server.Server {
	t.Helper()
	return runServer(t, env, "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1000}}\n")
}

// slowTimeout is the client's -timeout in tests that call a server: the 5 s
// default (checked in TestClientExitCodes) is for people; a starved test
// machine can take longer to answer, which is not what these tests check.
const slowTimeout = "2m"

func TestClientAgainstAServer(t *testing.T) {
	srv := startServer(t, nil)
	out, err := captureStdout(t, func() error {
		return runClient([]string{"-timeout", slowTimeout, "-dial_string", srv.Addrs().GRPC.String(), "-domain", "d", "-descriptors", "a=1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The reference's client prints the response in protobuf text form.
	for _, want := range []string{"response: ", "overall_code:OK", "requests_per_unit:1000", "unit:SECOND", "limit_remaining:999"} {
		if !strings.Contains(strings.ReplaceAll(out, ": ", ":"), strings.ReplaceAll(want, ": ", ":")) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// ... after its flags, as "Flag: --name=%q" lines in name order.
	wantFlags := "Flag: --descriptors=\"[ <key=a, value=1> ] \"\n" +
		"Flag: --dial_string=\"" + srv.Addrs().GRPC.String() + "\"\n" +
		"Flag: --domain=\"d\"\n" +
		"Flag: --grpc-cert-file=\"\"\n" +
		"Flag: --grpc-key-file=\"\"\n" +
		"Flag: --grpc-server-ca-file=\"\"\n" +
		"Flag: --grpc-use-tls=\"false\"\n" +
		"Flag: --oltp-protocol=\"\"\n" +
		"Flag: --timeout=\"2m0s\"\n" +
		"response: "
	if !strings.HasPrefix(out, wantFlags) {
		t.Errorf("output:\n%s\nwant it to start:\n%s", out, wantFlags)
	}
	// As the reference's client, a request without descriptors is sent and
	// the server's refusal printed.
	out, err = captureStdout(t, func() error {
		return runClient([]string{"-timeout", slowTimeout, "-dial_string", srv.Addrs().GRPC.String(), "-domain", "d"})
	})
	if err != exitCode(1) || !strings.Contains(out, "request error: rpc error: code = InvalidArgument desc = rate limit descriptor list must not be empty\n") {
		t.Errorf("no descriptors: %v\n%s", err, out)
	}
	if err := runClient([]string{"-domain", "d", "-descriptors", "novalue"}); exitStatus("client", err) != 2 {
		t.Errorf("a malformed descriptor: %v, want exit status 2", err)
	}
	// A request the server refuses: "request error: ..." and status 1.
	out, err = captureStdout(t, func() error {
		return runClient([]string{"-timeout", slowTimeout, "-dial_string", srv.Addrs().GRPC.String(), "-domain", "", "-descriptors", "a=1"})
	})
	if err != exitCode(1) || !strings.Contains(out, "request error: rpc error: code = InvalidArgument desc = rate limit domain must not be empty\n") {
		t.Errorf("empty domain: %v\n%s", err, out)
	}
}

func TestClientExitCodes(t *testing.T) {
	srv := startServer(t, nil)
	addr := srv.Addrs().GRPC.String()
	for _, tc := range []struct {
		name string
		args []string
		code exitCode
		out  string
	}{
		{"request error", []string{"-timeout", slowTimeout, "-dial_string", addr, "-domain", "d", "-descriptors", "a=1", "-grpc-use-tls"}, 1, "request error: rpc error: code = Unavailable"},
		{"the 5s default timeout", []string{"-dial_string", addr, "-domain", "d", "-descriptors", "a=1", "-oltp-protocol", "ftp"}, 2, "Flag: --timeout=\"5s\"\n"},
		{"bad tracing protocol", []string{"-dial_string", addr, "-domain", "d", "-descriptors", "a=1", "-oltp-protocol", "ftp"}, 2, "Invalid otlptrace client protocol: ftp"},
		{"unknown flag", []string{"-bogus"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := captureStdout(t, func() error { return runClient(tc.args) })
			if exitStatus("client", err) != int(tc.code) || !strings.Contains(out, tc.out) {
				t.Fatalf("err %v, output %q; want exit status %d and %q", err, out, tc.code, tc.out)
			}
		})
	}
}

// TestClientTLS: -grpc-use-tls with the server's CA (and a client
// certificate, which a mutual-TLS server requires) reaches a TLS server.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := testenv.GenerateTLS(t, dir, "127.0.0.1", "localhost")
	srv := startServer(t, map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key, "GRPC_CLIENT_TLS_CACERT": ca})
	out, err := captureStdout(t, func() error {
		return runClient([]string{"-timeout", slowTimeout, "-dial_string", srv.Addrs().GRPC.String(), "-domain", "d", "-descriptors", "a=1",
			"-grpc-use-tls", "-grpc-server-ca-file", ca, "-grpc-cert-file", cert, "-grpc-key-file", key})
	})
	if err != nil || !strings.Contains(out, "limit_remaining:999") {
		t.Fatalf("%v\n%s", err, out)
	}
	// Without the client certificate the mutual-TLS server refuses.
	out, err = captureStdout(t, func() error {
		return runClient([]string{"-timeout", slowTimeout, "-dial_string", srv.Addrs().GRPC.String(), "-domain", "d", "-descriptors", "a=1",
			"-grpc-use-tls", "-grpc-server-ca-file", ca})
	})
	if err != exitCode(1) || !strings.Contains(out, "request error: ") {
		t.Fatalf("no client certificate: %v\n%s", err, out)
	}
}

// TestConfigCheckDir: the reference's config_check form, its output lines
// and exit codes.
func TestConfigCheckDir(t *testing.T) {
	good := t.TempDir()
	os.WriteFile(filepath.Join(good, "a.yaml"), []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	os.WriteFile(filepath.Join(good, "b.yaml"), []byte("domain: d\ndescriptors:\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "a.yaml"), []byte("domain: e\ndescriptors:\n  - {key: a, rate_limit: {unit: eon, requests_per_unit: 1}}\n"), 0o644)
	ga, gb, ba := filepath.Join(good, "a.yaml"), filepath.Join(good, "b.yaml"), filepath.Join(bad, "a.yaml")
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"merged", []string{"-config_dir", good, "-merge_domain_configs"}, 0,
			"checking rate limit configs...\nloading config directory: " + good + "\nopening config file: " + ga + "\nopening config file: " + gb + "\nall rate limit configs ok\n"},
		{"duplicate domain without merge", []string{"-config_dir", good}, 1,
			"checking rate limit configs...\nloading config directory: " + good + "\nopening config file: " + ga + "\nopening config file: " + gb + "\nerror loading rate limit configs: " + gb + ": duplicate domain 'd' in config file\n"},
		{"bad file", []string{"-config_dir", bad}, 1,
			"checking rate limit configs...\nloading config directory: " + bad + "\nopening config file: " + ba + "\nerror loading rate limit configs: " + ba + ": invalid rate limit unit 'eon'\n"},
		{"missing directory", []string{"-config_dir", filepath.Join(good, "nope")}, 1,
			"checking rate limit configs...\nloading config directory: " + filepath.Join(good, "nope") + "\nerror opening directory " + filepath.Join(good, "nope") + ": open " + filepath.Join(good, "nope") + ": no such file or directory\n"},
		{"unknown flag", []string{"-config_dirr", good}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := captureStdout(t, func() error { return runConfigCheck(tc.args) })
			if exitStatus("config_check", err) != tc.code || out != tc.out {
				t.Fatalf("err %v, output:\n%s\nwant %v and:\n%s", err, out, tc.code, tc.out)
			}
		})
	}
}
