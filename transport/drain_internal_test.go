package transport

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/netx"
	"github.com/sluicehq/sluice/internal/testenv"
)

// A drain closes a connection net/http has called idle for longer than
// drainIdle only when it holds no request: not one whose request waits
// unread in the socket (net/http's goroutine not yet run, as under CPU
// load), nor one whose request has been read in part. Both used to be
// closed, and their requests lost.
func TestDrainKeepsUnreadRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dl := &drainListener{Listener: ln}
	accept := func() (client, server net.Conn) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = dl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return client, server
	}
	d := newDrainServer(&http.Server{Handler: http.NotFoundHandler()})
	const req = "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

	unreadC, unread := accept()   // its request waits in the socket
	partialC, partial := accept() // its request is read in part
	_, idle := accept()           // sends nothing
	for _, c := range []net.Conn{unread, partial, idle} {
		d.track(c, http.StateIdle)
	}
	for _, c := range []net.Conn{unreadC, partialC} {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "the requests to arrive", func() bool {
		return netx.Pending(unread.(*drainConn).Conn) && netx.Pending(partial.(*drainConn).Conn)
	})
	var b [10]byte
	if _, err := partial.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	if open := d.closeIdle(time.Now().Add(time.Second)); open != 2 {
		t.Fatalf("%d connections left open, want 2 (the unread and the partly read request)", open)
	}
	d.mu.Lock()
	_, keptUnread := d.conns[unread]
	_, keptPartial := d.conns[partial]
	_, keptIdle := d.conns[idle]
	d.mu.Unlock()
	if !keptUnread || !keptPartial || keptIdle {
		t.Fatalf("kept: unread %v, partly read %v, silent %v; want true, true, false", keptUnread, keptPartial, keptIdle)
	}
	got, err := io.ReadAll(io.LimitReader(unread, int64(len(req))))
	if err != nil || string(got) != req {
		t.Fatalf("the unread request after the drain's pass: %q %v", got, err)
	}
}
