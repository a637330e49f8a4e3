package deploy_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/odatatest"
)

// TestDashboardODataPanels checks the dashboard's OData panels against a
// scrape of a running OData API (SQLite) after a few requests: a page, a
// bad query and an unknown key.
func TestDashboardODataPanels(t *testing.T) {
	ctx := context.Background()
	db, err := odata.OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "o.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g, err := gen.New(gen.Config{Rows: 500, Datasets: 2, Locations: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Load(ctx, db, g, nil); err != nil {
		t.Fatal(err)
	}
	key, _, err := db.AddKey(ctx, "dash")
	if err != nil {
		t.Fatal(err)
	}
	opts := odata.DefaultOptions()
	opts.Metrics = odata.NewMetrics()
	opts.MetricsPath = "/metrics"
	_, root := odatatest.Serve(t, opts, db, db, nil)
	base := strings.TrimSuffix(root, opts.Root)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for _, r := range []struct {
		path, key string
		want      int
	}{
		{"/v1/odata/v4/Observations?$top=5&$filter=CharacteristicName%20eq%20'pH'", key, 200},
		{"/v1/odata/v4/Observations?$filter=Nope%20eq%201", key, 400},
		{"/v1/odata/v4/Observations", "unknown", 403},
	} {
		req, _ := http.NewRequest("GET", base+r.path, nil)
		req.Header.Set("x-api-key", r.key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.want {
			t.Fatalf("%s: %d, want %d", r.path, resp.StatusCode, r.want)
		}
	}
	// The page is recorded when its body closes, just after its last byte.
	deadline := time.Now().Add(10 * time.Second)
	for scrapeFamilies(t, base+"/metrics")["sluice_odata_rows_total"] == nil {
		if time.Now().After(deadline) {
			t.Fatal("the page never reached the scrape")
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkDashboard(t, scrapeFamilies(t, base+"/metrics"), isOData,
		[][2]string{{"sluice_odata_first_byte_seconds", "sluice_odata_first_byte_second"}, {"collection", "colection"}, {"sluice_odata_db_connections_in_use", "sluice_odata_db_connection_in_use"}})
}
