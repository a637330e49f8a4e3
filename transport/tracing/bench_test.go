package tracing_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/transport/tracing"
)

// BenchmarkDecision is one decision without tracing and with every span
// sampled and exported over OTLP/http to an in-process receiver.
func BenchmarkDecision(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "plain"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			var tr *tracing.Tracing
			var counter engine.Counter = engine.DirectCounter{Backend: memory.New(nil)}
			if traced {
				col := startHTTPCollector(b)
				s := tracing.DefaultSettings()
				s.Enabled, s.Endpoint = true, "http://"+col.addr
				var err error
				if tr, err = tracing.New(s, tracing.Options{}); err != nil {
					b.Fatal(err)
				}
				if err := tr.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
				counter = tr.Counter(counter, "memory")
			}
			o := engine.DefaultOptions()
			o.Counter = counter
			svc, err := engine.NewService(o)
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "d", YAML: []byte(rules)}}, false)
			if err != nil {
				b.Fatal(err)
			}
			svc.SetConfig(cfg)
			var d tracing.Decider = svc
			if traced {
				d = tr.Decider(svc)
			}
			req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k", Value: "v"}}}}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := d.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
