package h2grpc

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkBidiEcho is one message each way on a bidirectional stream,
// in turn, with grpc-go's client, against this server and against
// grpc-go's (a stream handler with the same raw codec): at 1 KiB the
// per-message cost, at 256 KiB (a rate limit quota report of a few
// thousand buckets) the cost of moving the bytes.
func BenchmarkBidiEcho(b *testing.B) {
	servers := map[string]func(b *testing.B) string{
		"h2grpc": func(b *testing.B) string {
			s, err := NewServer(Options{BidiMethods: map[string]BidiMethod{"/t.S/Echo": bidiEcho}})
			if err != nil {
				b.Fatal(err)
			}
			return listen(b, s.Serve, s.Stop)
		},
		"grpc-go": func(b *testing.B) string {
			s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
				for {
					var msg []byte
					if err := ss.RecvMsg(&msg); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
					if err := ss.SendMsg(&msg); err != nil {
						return err
					}
				}
			}))
			return listen(b, s.Serve, s.Stop)
		},
	}
	for _, name := range []string{"h2grpc", "grpc-go"} {
		for _, size := range []int{1 << 10, 256 << 10} {
			b.Run(name+"/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
				addr := servers[name](b)
				cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer cc.Close()
				cs, err := cc.NewStream(context.Background(), bidiDesc, "/t.S/Echo", callOpt())
				if err != nil {
					b.Fatal(err)
				}
				msg := patterned(1, size)
				b.SetBytes(int64(2 * size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := cs.SendMsg(&msg); err != nil {
						b.Fatal(err)
					}
					var got []byte
					if err := cs.RecvMsg(&got); err != nil || len(got) != size {
						b.Fatalf("%d bytes, %v", len(got), err)
					}
				}
				b.StopTimer()
				cs.CloseSend()
			})
		}
	}
}

// listen serves on a loopback port until the benchmark ends.
func listen(b *testing.B, serve func(net.Listener) error, stop func()) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, ErrServerStopped) && !errors.Is(err, grpc.ErrServerStopped) {
			b.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}
