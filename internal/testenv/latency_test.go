package testenv

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every connection until Cleanup.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestLatencyProxy(t *testing.T) {
	const oneWay = 5 * time.Millisecond
	p := StartLatencyProxy(t, echoServer(t), oneWay)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))

	// A round trip takes at least the two delays (a floor, whatever the load).
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo %q, %v", buf, err)
		}
		if rtt := time.Since(start); rtt < 2*oneWay {
			t.Fatalf("round trip %v through a proxy adding %v each way", rtt, oneWay)
		}
	}

	// Bytes arrive intact and in order, more than one chunk and more than
	// the queue holds at once.
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(data))
		_, err := io.ReadFull(c, b)
		if err != nil {
			b = nil
		}
		got <- b
	}()
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatal("the echo through the proxy differs from what was sent")
	}

	// The client's end of stream reaches the server, whose end comes back.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after half-close: read %d, %v; want EOF", n, err)
	}
	if p.Accepted() != 1 {
		t.Fatalf("accepted %d connections, want 1", p.Accepted())
	}
}

// A target that is down closes the client's connection; Close cuts open
// connections and stops every goroutine (TestMain's goleak checks).
func TestLatencyProxyTargetDownAndClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p := StartLatencyProxy(t, dead, time.Millisecond)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to a dead target stayed open")
	}
	_ = c.Close()

	live := StartLatencyProxy(t, echoServer(t), time.Hour) // nothing is ever delivered
	open, err := net.Dial("tcp", live.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the proxy to hold the connection", func() bool {
		live.mu.Lock()
		defer live.mu.Unlock()
		return len(live.conns) == 1
	})
	live.Close() // must not wait an hour
	_ = open.SetDeadline(time.Now().Add(30 * time.Second))
	if n, err := open.Read(make([]byte, 4)); err == nil {
		t.Fatalf("read %d bytes after Close", n)
	}
}
