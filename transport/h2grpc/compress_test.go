package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
)

func gzipped(t testing.TB, p []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// grpcMessage is p with gRPC's prefix: the compressed flag and the length.
func grpcMessage(compressed byte, p []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{compressed}, uint32(len(p))), p...)
}

// TestGzipFromGRPCGo: grpc-go's client configured for gzip is served, from
// an empty message to one larger than the windows.
func TestGzipFromGRPCGo(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	cc := dial(t, addr)
	for _, n := range []int{0, 10, 100 << 10, 3 << 20} {
		req := bytes.Repeat([]byte("sluice "), n/7+1)[:n]
		var resp []byte
		if err := cc.Invoke(context.Background(), "/t.S/Echo", &req, &resp, callOpt(), grpc.UseCompressor(grpcgzip.Name)); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(resp, req) {
			t.Fatalf("%d bytes: echo differs (%d bytes back)", n, len(resp))
		}
	}
}

// TestCompressedRequests: what grpc-encoding and the compressed flag make
// of a request, and the grpc-accept-encoding of the answers.
func TestCompressedRequests(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, MaxRecvMsgSize: 1 << 16, MaxRequestBytes: 1<<16 + 5})
	bomb := gzipped(t, make([]byte, 1<<16+1))
	for _, c := range []struct {
		name     string
		encoding string
		body     []byte
		code     codes.Code
		msg      string // part of the status message
		accept   string // grpc-accept-encoding of the answer
	}{
		{"gzip", "gzip", grpcMessage(1, gzipped(t, []byte("hello"))), codes.OK, "", "identity,gzip"},
		{"gzip named, message not compressed", "gzip", grpcMessage(0, []byte("hello")), codes.OK, "", "identity,gzip"},
		{"identity", "identity", grpcMessage(0, []byte("hello")), codes.OK, "", "identity,gzip"},
		{"none", "", grpcMessage(0, []byte("hello")), codes.OK, "", ""},
		{"compressed without encoding", "", grpcMessage(1, gzipped(t, []byte("hello"))), codes.Internal, "compressed flag set", ""},
		{"compressed with identity", "identity", grpcMessage(1, gzipped(t, []byte("hello"))), codes.Internal, "compressed flag set", "identity,gzip"},
		{"unknown flag", "gzip", grpcMessage(2, []byte("hello")), codes.Internal, "compressed flag set", "identity,gzip"},
		{"not gzip", "gzip", grpcMessage(1, []byte("hello")), codes.Internal, "failed to decompress", "identity,gzip"},
		{"cut short", "gzip", grpcMessage(1, gzipped(t, []byte("hello"))[:12]), codes.Internal, "failed to decompress", "identity,gzip"},
		{"larger than the limit once inflated", "gzip", grpcMessage(1, bomb), codes.ResourceExhausted, "after decompression larger than max", "identity,gzip"},
		{"unknown coding", "snappy", nil, codes.Unimplemented, `Decompressor is not installed for grpc-encoding "snappy"`, "identity,gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			var enc []string
			if c.encoding != "" {
				enc = []string{"grpc-encoding", c.encoding}
			}
			r.headers(1, "/t.S/Echo", c.body == nil, enc...)
			if c.body != nil {
				if err := r.fr.WriteData(1, true, c.body); err != nil {
					t.Fatal(err)
				}
			}
			var msg []byte
			var head http2.Frame
			for {
				f := r.next(isStream(1))
				if d, ok := f.(*http2.DataFrame); ok {
					msg = append(msg, d.Data()...)
					continue
				}
				if head == nil {
					head = f
				}
				if f.Header().Flags.Has(http2.FlagHeadersEndStream) {
					if got := field(f, "grpc-status"); got != strconv.Itoa(int(c.code)) {
						t.Fatalf("grpc-status %s, want %d (%s)", got, c.code, field(f, "grpc-message"))
					}
					if !strings.Contains(field(f, "grpc-message"), c.msg) {
						t.Errorf("grpc-message %q, want it to say %q", field(f, "grpc-message"), c.msg)
					}
					break
				}
			}
			if got := field(head, "grpc-accept-encoding"); got != c.accept {
				t.Errorf("grpc-accept-encoding %q, want %q", got, c.accept)
			}
			if c.code == codes.OK && string(msg) != string(grpcMessage(0, []byte("hello"))) {
				t.Errorf("answer %q", msg)
			}
		})
	}
}
