package transport_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// Slow and idle clients of the /json and debug ports are cut off after the
// configured timeouts, so they cannot hold connections open for as long as
// they like.
func TestListenerTimeouts(t *testing.T) {
	h := start(t, map[string]string{
		"SLUICE_HTTP_READ_HEADER_TIMEOUT": "200ms", "SLUICE_HTTP_READ_TIMEOUT": "400ms", "SLUICE_HTTP_IDLE_TIMEOUT": "400ms",
	}, map[string]string{"a.yaml": "domain: d\n"})
	a := h.Srv.Addrs()
	for _, port := range []struct {
		name string
		addr string
	}{{"/json", a.HTTP.String()}, {"debug", a.Debug.String()}} {
		for _, c := range []struct {
			name string
			send string // then nothing more
		}{
			{"slow headers", "POST /json HTTP/1.1\r\nHost: x\r\n"},
			{"slow body", "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"domain\":"},
			{"idle keep-alive", "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"},
		} {
			t.Run(port.name+"/"+c.name, func(t *testing.T) {
				conn, err := net.Dial("tcp", port.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := io.WriteString(conn, c.send); err != nil {
					t.Fatal(err)
				}
				// The server must close the connection; 10 s is far beyond
				// every timeout set above, and far below "as long as the
				// client likes".
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(conn)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the server kept the connection open (read %q)", got)
				}
				if c.name == "idle keep-alive" && !strings.HasPrefix(string(got), "HTTP/1.1 ") {
					t.Fatalf("no answer before the idle close: %q", got)
				}
			})
		}
	}
}

func TestHTTPTimeoutSettings(t *testing.T) {
	s, err := settingsFor(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Listen.HTTPTimeouts, settings.DefaultHTTPTimeouts(); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if want := (settings.HTTPTimeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Idle: 90 * time.Second}); settings.DefaultHTTPTimeouts() != want {
		t.Errorf("defaults are not the OData port's %+v", want)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string // in the error; "" for none
	}{
		{map[string]string{"SLUICE_HTTP_READ_TIMEOUT": "5s", "SLUICE_HTTP_READ_HEADER_TIMEOUT": "1s", "SLUICE_HTTP_IDLE_TIMEOUT": "1m"}, ""},
		{map[string]string{"SLUICE_HTTP_READ_TIMEOUT": "0s"}, "SLUICE_HTTP_READ_TIMEOUT must be positive"},
		{map[string]string{"SLUICE_HTTP_IDLE_TIMEOUT": "-1s"}, "SLUICE_HTTP_IDLE_TIMEOUT must be positive"},
		{map[string]string{"SLUICE_HTTP_READ_HEADER_TIMEOUT": "0s"}, "SLUICE_HTTP_READ_HEADER_TIMEOUT must be positive"},
		{map[string]string{"SLUICE_HTTP_READ_HEADER_TIMEOUT": "1m"}, "must not exceed SLUICE_HTTP_READ_TIMEOUT"},
		{map[string]string{"SLUICE_HTTP_READ_TIMEOUT": "soon"}, "SLUICE_HTTP_READ_TIMEOUT"},
	} {
		_, err := settingsFor(tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one with %q", tc.env, err, tc.want)
		}
	}
}
