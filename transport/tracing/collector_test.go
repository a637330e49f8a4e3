package tracing_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// span is one received span, flattened for assertions.
type span struct {
	name     string
	traceID  string
	spanID   string
	parentID string
	attrs    map[string]string
	resource map[string]string
}

// collector is a tiny OTLP trace receiver: an HTTP handler for /v1/traces
// or a gRPC TraceService, recording every span and the request headers.
type collector struct {
	mu      sync.Mutex
	spans   []span
	headers []map[string]string
	addr    string
	stop    func()
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest, headers map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.headers = append(c.headers, headers)
	for _, rs := range req.GetResourceSpans() {
		res := kv(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, span{
					name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()), attrs: kvSpan(s), resource: res,
				})
			}
		}
	}
}

func kvSpan(s *tracepb.Span) map[string]string { return kv(s.GetAttributes()) }

// kv flattens attributes to strings (ints in decimal).
func kv(attrs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, a := range attrs {
		v := a.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			out[a.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			out[a.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		default:
			out[a.GetKey()] = v.GetStringValue()
		}
	}
	return out
}

func (c *collector) all() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]span(nil), c.spans...)
}

func (c *collector) lastHeaders() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.headers) == 0 {
		return nil
	}
	return c.headers[len(c.headers)-1]
}

func startHTTPCollector(t testing.TB) *collector {
	t.Helper()
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		c.add(&req, map[string]string{"authorization": r.Header.Get("Authorization"), "content-type": r.Header.Get("Content-Type")})
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	c.addr = ln.Addr().String()
	c.stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}
	t.Cleanup(c.stop)
	return c
}

type grpcTraceService struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g *grpcTraceService) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	if v := md.Get("authorization"); len(v) > 0 {
		h["authorization"] = v[0]
	}
	g.c.add(req, h)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startGRPCCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, &grpcTraceService{c: c})
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	c.addr = ln.Addr().String()
	c.stop = func() { g.Stop(); <-done }
	t.Cleanup(c.stop)
	return c
}
