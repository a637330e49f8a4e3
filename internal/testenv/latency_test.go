package testenv

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestLatencyProxy: pipelined lines come back whole and in order, no
// sooner than one round trip, and Close leaves no goroutine behind.
func TestLatencyProxy(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	const oneWay = 20 * time.Millisecond
	p := StartLatencyProxy(t, ln.Addr().String(), oneWay)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	start := time.Now()
	const lines = 20
	for i := 0; i < lines; i++ { // pipelined: all written before any answer
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < lines; i++ {
		if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
			t.Fatalf("answer %d: %q %v", i, l, err)
		}
	}
	took := time.Since(start)
	if took < 2*oneWay {
		t.Fatalf("%d pipelined round trips took %v, less than one round trip (%v)", lines, took, 2*oneWay)
	}
	c.Close()
	p.Close()
	ln.Close()
}
