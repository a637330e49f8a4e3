package h2grpc

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestFrameScan: frame headers are found whatever the writes split.
func TestFrameScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var want []uint32
	for i := range 500 {
		id := uint32(2*i + 1)
		switch i % 3 {
		case 0:
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, rng.IntN(100)), EndHeaders: true})
		case 1:
			fr.WriteData(id, i%2 == 0, make([]byte, rng.IntN(20000)))
		case 2:
			fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		want = append(want, id)
	}
	b := buf.Bytes()
	for round := range 20 {
		var s frameScan
		var got []uint32
		for rest := b; len(rest) > 0; {
			chunk := rest[:min(len(rest), 1+rng.IntN(40000))]
			if round%2 == 0 {
				chunk = rest[:min(len(rest), 1+rng.IntN(12))]
			}
			rest = rest[len(chunk):]
			for len(chunk) > 0 {
				k, ok := s.feed(chunk)
				chunk = chunk[k:]
				if ok {
					got = append(got, s.id())
				}
			}
		}
		if !s.boundary() || len(got) != len(want) {
			t.Fatalf("round %d: %d headers found of %d (at a boundary: %v)", round, len(got), len(want), s.boundary())
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("round %d: header %d names stream %d, want %d", round, i, got[i], want[i])
			}
		}
	}
}

// guardPair is a guarded server side and its client, on loopback.
func guardPair(t *testing.T, o GuardOptions) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	g := Guard(sv, o)
	t.Cleanup(func() { cl.Close(); g.Close() })
	return g, cl
}

// readAll reads from g until it has n bytes or fails.
func readN(g net.Conn, n int) error {
	_, err := io.ReadFull(g, make([]byte, n))
	return err
}

// TestGuardOpenStreams: past MaxOpenStreams streams whose end is not
// written, the guard stops reading; an end written lets it read again,
// and a peer that holds the limit for WriteTimeout is cut off.
func TestGuardOpenStreams(t *testing.T) {
	g, cl := guardPair(t, GuardOptions{MaxOpenStreams: 3, WriteTimeout: 300 * time.Millisecond})
	var in bytes.Buffer
	in.WriteString(http2.ClientPreface)
	cfr := http2.NewFramer(&in, nil)
	for id := uint32(1); id <= 7; id += 2 { // four streams
		cfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x82}, EndHeaders: true})
	}
	if _, err := cl.Write(in.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := readN(g, in.Len()); err != nil {
		t.Fatal(err)
	}
	// Four open: the next read waits, then gets what follows once stream
	// 1's end is written.
	got := make(chan error, 1)
	go func() { got <- readN(g, 9+8) }()
	cfr2 := http2.NewFramer(cl, nil)
	cfr2.WritePing(false, [8]byte{1})
	var out bytes.Buffer
	sfr := http2.NewFramer(&out, nil)
	sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x88}, EndHeaders: true, EndStream: true})
	sfr.WriteRSTStream(3, http2.ErrCodeNo)
	// Written in pieces, as a buffered writer may.
	for p := out.Bytes(); len(p) > 0; p = p[min(len(p), 5):] {
		if _, err := g.Write(p[:min(len(p), 5)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("reading after two ends were written: %v", err)
	}
	// Two open; two more make four, which nobody ends.
	in.Reset()
	for id := uint32(9); id <= 11; id += 2 {
		cfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x82}, EndHeaders: true})
	}
	cl.Write(in.Bytes())
	if err := readN(g, in.Len()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := readN(g, 1)
	if !errors.Is(err, ErrGuardCutOff) {
		t.Fatalf("read with four streams open for good: %v, want the guard's cut", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("cut off after %v, before WriteTimeout", d)
	}
}

// TestGuardSettingsFlood: the SETTINGS budget, then GOAWAY
// ENHANCE_YOUR_CALM and the end of the connection.
func TestGuardSettingsFlood(t *testing.T) {
	g, cl := guardPair(t, GuardOptions{Floods: FloodLimits{SettingsBurst: 5, Interval: time.Hour}})
	var in bytes.Buffer
	in.WriteString(http2.ClientPreface)
	cfr := http2.NewFramer(&in, nil)
	for range 20 {
		cfr.WriteSettings()
		cfr.WriteSettingsAck() // not counted
	}
	go cl.Write(in.Bytes())
	_, err := io.Copy(io.Discard, g)
	if !errors.Is(err, ErrGuardCutOff) {
		t.Fatalf("reading a flood: %v, want the guard's cut", err)
	}
	cl.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, err := http2.NewFramer(nil, cl).ReadFrame()
	if ga, ok := f.(*http2.GoAwayFrame); !ok || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("the client read %v, %v; want GOAWAY ENHANCE_YOUR_CALM", f, err)
	}
}

// TestGuardNotHTTP2: bytes that are not the client preface (TLS the guard
// cannot read) pass as they are.
func TestGuardNotHTTP2(t *testing.T) {
	g, cl := guardPair(t, GuardOptions{Floods: FloodLimits{SettingsBurst: 1, Interval: time.Hour}})
	junk := append([]byte("\x16\x03\x01 not a preface"), bytes.Repeat([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, 100)...)
	go cl.Write(junk)
	if err := readN(g, len(junk)); err != nil {
		t.Fatal(err)
	}
}
