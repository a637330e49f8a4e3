package netx

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRetryable(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{emfile, true},
		{fmt.Errorf("wrapped: %w", syscall.ENFILE), true},
		{syscall.ECONNABORTED, true},
		{net.ErrClosed, false},
		{errors.New("something else"), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// failing fails its first n accepts with EMFILE, then accepts from ln.
type failing struct {
	net.Listener
	n int
}

func (f *failing) Accept() (net.Conn, error) {
	if f.n > 0 {
		f.n--
		return nil, &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// An EMFILE is waited out, not returned; the connection behind it is
// accepted once the descriptors are back.
func TestAcceptWaitsOutEMFILE(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(&failing{Listener: inner, n: 3}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after 3 EMFILEs: %v", err)
	}
	s.Close()
	if l.Retried() != 3 {
		t.Fatalf("retried %d, want 3", l.Retried())
	}
}

// Close ends an Accept waiting out failures.
func TestCloseEndsTheWait(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := Listen(&failing{Listener: inner, n: 1 << 30}, Config{})
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

// Beyond the cap a connection is answered 503 and closed; once one closes,
// the next is served.
func TestCapRefusesPolitely(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := Listen(inner, Config{Max: 2, Refuse: RefuseHTTP})
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	a, b := <-accepted, <-accepted
	fmt.Fprint(clients[2], "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(clients[2]).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("third connection: %q %v", line, err)
	}
	if l.Open() != 2 || l.Refused() != 1 {
		t.Fatalf("open %d refused %d, want 2 and 1", l.Open(), l.Refused())
	}
	a.Close()
	a.Close() // counted out once
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := <-accepted
	if l.Open() != 2 {
		t.Fatalf("open %d after one closed and one came, want 2", l.Open())
	}
	b.Close()
	d.Close()
}
