package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// The event-loop driver calls the service the way a proxy's worker thread
// does (Envoy's workers are event loops, each with its own HTTP/2
// connections): one goroutine per connection keeps that connection's callers'
// calls in flight as HTTP/2 streams. The flow, per connection:
//
//	write the first call of every caller, in one write
//	loop: read the frames that have arrived
//	        an answer's trailers end its call: record its latency and queue
//	        that caller's next call
//	      when nothing more is buffered, write the queued calls in one write
//
// No goroutine is woken per call, so what the driver takes from the machine
// does not grow with the server's latency, as grpc-go's client does (a
// caller goroutine, the connection's reader and its writer hand every call
// along). The requests' bytes are built before the run. Header blocks use
// HPACK's dynamic table as real clients do: the first call of a connection
// adds its fields to the table, and every later call's block is the same few
// index bytes.

const h2Path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// h2Call is one caller of a connection: its requests, where it is in them and
// when its call in flight started.
type h2Call struct {
	reqs  [][]byte // gRPC messages, 5-byte prefix included
	n     int
	start time.Time
	phase int32  // the run's phase when the call started
	msg   []byte // the answer's DATA so far
}

// h2Conn is one connection's loop and what it measured.
type h2Conn struct {
	c        net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	fr       *http2.Framer
	first    []byte // the first call's header block: literals the table keeps
	header   []byte // every later call's header block: indexes into the table
	phase    *atomic.Int32
	calls    []h2Call
	inFlight map[uint32]int // stream → index in calls
	nextID   uint32
	sendWin  int64 // connection send window
	streamW  int64 // a new stream's send window (the server's initial window)
	recvd    int64 // DATA bytes received since the last WINDOW_UPDATE
	// grpcStatus and httpStatus are the last header block's.
	grpcStatus, httpStatus string
	resp                   rlsv3.RateLimitResponse
	dec                    *hpack.Decoder
	waiting                []int // callers whose next call waits for send window

	lat      []time.Duration
	errs     uint64
	firstErr string
}

// driveH2 runs w like drive, with the event-loop driver.
func driveH2(addrs []string, w workload, warmup, d time.Duration) (loadResult, error) {
	var phase atomic.Int32
	nconns := max(1, w.Conns)
	conns := make([]*h2Conn, 0, nconns)
	defer func() {
		for _, hc := range conns {
			hc.c.Close()
		}
	}()
	for i := range nconns {
		c, err := net.Dial("tcp", addrs[i%len(addrs)])
		if err != nil {
			return loadResult{}, err
		}
		conns = append(conns, newH2Conn(c, addrs[i%len(addrs)], &phase))
	}
	for i := 0; i < w.Callers; i++ {
		hc := conns[i%nconns]
		var msgs [][]byte
		for _, r := range requests(w, i) {
			b, err := proto.Marshal(r)
			if err != nil {
				return loadResult{}, err
			}
			m := make([]byte, 5+len(b))
			binary.BigEndian.PutUint32(m[1:5], uint32(len(b)))
			copy(m[5:], b)
			msgs = append(msgs, m)
		}
		hc.calls = append(hc.calls, h2Call{reqs: msgs})
	}
	var wg sync.WaitGroup
	runErrs := make([]error, nconns)
	for i, hc := range conns {
		hc.lat = make([]time.Duration, 0, sampleCapacity(w, d)*max(len(hc.calls), 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErrs[i] = hc.run()
		}()
	}
	elapsed, cpu := measureWindow(&phase, warmup, d)
	// A server that stopped answering must not hang the bench: a deadline on
	// every connection ends its loop.
	for _, hc := range conns {
		hc.c.SetDeadline(time.Now().Add(driveGrace))
	}
	wg.Wait()
	var lat []time.Duration
	var errs uint64
	firstErr := ""
	for i, hc := range conns {
		if err := runErrs[i]; err != nil {
			return loadResult{}, fmt.Errorf("connection %d: %w", i, err)
		}
		lat = append(lat, hc.lat...)
		errs += hc.errs
		if firstErr == "" {
			firstErr = hc.firstErr
		}
	}
	return newLoadResult(lat, errs, firstErr, elapsed, cpu), nil
}

func newH2Conn(c net.Conn, authority string, phase *atomic.Int32) *h2Conn {
	hc := &h2Conn{
		c: c, br: bufio.NewReaderSize(c, 64<<10), bw: bufio.NewWriterSize(c, 64<<10),
		phase: phase, inFlight: map[uint32]int{}, nextID: 1,
		sendWin: 65535, streamW: 65535,
	}
	hc.fr = http2.NewFramer(hc.bw, hc.br)
	hc.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		switch f.Name {
		case "grpc-status":
			hc.grpcStatus = f.Value
		case ":status":
			hc.httpStatus = f.Value
		}
	})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	block := func() []byte {
		hb.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", h2Path}, {":authority", authority},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	// The same fields again find all of themselves in the table, so the
	// second block is the one every later call sends.
	hc.first, hc.header = block(), block()
	return hc
}

// run is the connection's loop; it returns when every caller has stopped.
func (hc *h2Conn) run() error {
	if _, err := hc.bw.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	// Windows big enough that the answers never wait for the driver.
	if err := hc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 24}); err != nil {
		return err
	}
	if err := hc.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		return err
	}
	for i := range hc.calls {
		if err := hc.send(i); err != nil {
			return err
		}
	}
	if err := hc.bw.Flush(); err != nil {
		return err
	}
	// Callers waiting for window matter only while the run goes on.
	for len(hc.inFlight) > 0 || len(hc.waiting) > 0 && hc.phase.Load() != 2 {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := hc.handle(f); err != nil {
			return err
		}
		if hc.br.Buffered() == 0 && hc.bw.Buffered() > 0 {
			if err := hc.bw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// send starts caller i's next call, or notes that it waits for window.
func (hc *h2Conn) send(i int) error {
	if hc.phase.Load() == 2 {
		return nil
	}
	call := &hc.calls[i]
	m := call.reqs[call.n%len(call.reqs)]
	if int64(len(m)) > hc.sendWin || int64(len(m)) > hc.streamW {
		hc.waiting = append(hc.waiting, i)
		return nil
	}
	call.n++
	id := hc.nextID
	hc.nextID += 2
	hc.inFlight[id] = i
	call.phase = hc.phase.Load()
	call.start = time.Now()
	block := hc.header
	if id == 1 {
		block = hc.first
	}
	if err := hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
		return err
	}
	hc.sendWin -= int64(len(m))
	return hc.fr.WriteData(id, true, m)
}

func (hc *h2Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return hc.onSettings(f)
	case *http2.WindowUpdateFrame:
		return hc.onWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			return hc.fr.WritePing(true, f.Data)
		}
		return nil
	case *http2.GoAwayFrame:
		return fmt.Errorf("server sent GOAWAY (%v)", f.ErrCode)
	case *http2.RSTStreamFrame:
		return hc.finish(f.StreamID, fmt.Sprintf("stream reset: %v", f.ErrCode))
	case *http2.DataFrame:
		return hc.onData(f)
	case *http2.HeadersFrame:
		return hc.onHeaders(f)
	}
	return nil
}

// onSettings takes the server's stream window and refuses settings the
// workload cannot run under.
func (hc *h2Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
		hc.streamW = int64(v)
	}
	if v, ok := f.Value(http2.SettingHeaderTableSize); ok && v < 4096 {
		return fmt.Errorf("the server limits the HPACK table to %d bytes; the driver's header blocks need the default 4096", v)
	}
	if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok && int(v) < len(hc.calls) {
		return fmt.Errorf("the server allows %d streams per connection, the workload needs %d", v, len(hc.calls))
	}
	return hc.fr.WriteSettingsAck()
}

// onWindowUpdate grows the connection's send window and sends the calls
// that were waiting for it.
func (hc *h2Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID != 0 {
		return nil
	}
	hc.sendWin += int64(f.Increment)
	waiting := hc.waiting
	hc.waiting = nil
	for _, i := range waiting {
		if err := hc.send(i); err != nil {
			return err
		}
	}
	return nil
}

// onData collects an answer's bytes and returns receive window to the
// server in large steps.
func (hc *h2Conn) onData(f *http2.DataFrame) error {
	if i, ok := hc.inFlight[f.StreamID]; ok {
		hc.calls[i].msg = append(hc.calls[i].msg, f.Data()...)
	}
	hc.recvd += int64(f.Length)
	if hc.recvd >= 1<<29 {
		if err := hc.fr.WriteWindowUpdate(0, uint32(hc.recvd)); err != nil {
			return err
		}
		hc.recvd = 0
	}
	if f.StreamEnded() {
		return hc.finish(f.StreamID, "stream ended without trailers")
	}
	return nil
}

// onHeaders reads an answer's headers or trailers; the trailers end the
// call, whose message is then checked and decoded.
func (hc *h2Conn) onHeaders(f *http2.HeadersFrame) error {
	if !f.HeadersEnded() {
		return errors.New("CONTINUATION frames are not expected from a rate limit service")
	}
	hc.grpcStatus, hc.httpStatus = "", ""
	if _, err := hc.dec.Write(f.HeaderBlockFragment()); err != nil {
		return fmt.Errorf("response headers: %w", err)
	}
	if hc.httpStatus != "" && hc.httpStatus != "200" {
		return hc.finish(f.StreamID, "HTTP status "+hc.httpStatus)
	}
	if !f.StreamEnded() {
		return nil // the answer's headers; its trailers end it
	}
	i, ok := hc.inFlight[f.StreamID]
	if !ok {
		return nil
	}
	msg := hc.calls[i].msg
	switch {
	case hc.grpcStatus != "0":
		return hc.finish(f.StreamID, "trailers: grpc-status="+hc.grpcStatus)
	case len(msg) < 5 || int(binary.BigEndian.Uint32(msg[1:5])) != len(msg)-5:
		return hc.finish(f.StreamID, fmt.Sprintf("answer of %d bytes is not one gRPC message", len(msg)))
	}
	// Decode the answer as a proxy would.
	if err := proto.Unmarshal(msg[5:], &hc.resp); err != nil {
		return hc.finish(f.StreamID, "answer: "+err.Error())
	}
	return hc.finish(f.StreamID, "")
}

// finish ends a call (failed unless why is empty) and starts its caller's next
// call while the run goes on.
func (hc *h2Conn) finish(id uint32, why string) error {
	i, ok := hc.inFlight[id]
	if !ok {
		return nil // a stream already ended (e.g. reset after its trailers)
	}
	delete(hc.inFlight, id)
	call := &hc.calls[i]
	call.msg = call.msg[:0]
	if call.phase == 1 && hc.phase.Load() == 1 { // only calls that start and end in the window count
		if why != "" {
			hc.errs++
			if hc.firstErr == "" {
				hc.firstErr = why
			}
		} else {
			hc.lat = append(hc.lat, time.Since(call.start))
		}
	}
	return hc.send(i)
}
