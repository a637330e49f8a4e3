package odata_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/odatatest"
)

// BenchmarkPageMetrics pages /Observations (10,000-row pages, SQLite) from
// two servers over one store, one without metrics and one with them, in the
// same run: the ratio of their times is what the metrics cost. Run with
// -count to interleave them.
func BenchmarkPageMetrics(b *testing.B) {
	ctx := context.Background()
	db, err := odata.OpenStore(ctx, "sqlite:"+filepath.Join(b.TempDir(), "bench.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	g, err := gen.New(gen12k)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gen.Load(ctx, db, g, nil); err != nil {
		b.Fatal(err)
	}
	key, _, err := db.AddKey(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			opts := testOptions()
			opts.AccessLog = nil
			if on {
				opts.Metrics = odata.NewMetrics()
			}
			_, base := odatatest.Serve(b, opts, db, db, nil)
			c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer c.CloseIdleConnections()
			url := base + "/Observations?$top=10000"
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("x-api-key", key)
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.N)*10000/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
