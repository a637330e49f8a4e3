package odata_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/query"
)

// EnsureDemo generates data into an empty store only, and gives a fresh
// demo key each time, revoking the previous one.
func TestEnsureDemo(t *testing.T) {
	ctx := context.Background()
	db, err := odata.OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "demo.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var reported int64
	key1, err := odata.EnsureDemo(ctx, db, 3000, func(done, total int64) {
		if total != 3000 || done > total {
			t.Errorf("progress %d/%d", done, total)
		}
		reported = done
	})
	if err != nil {
		t.Fatal(err)
	}
	if reported != 3000 {
		t.Fatalf("progress ended at %d", reported)
	}
	count := func() int64 {
		q, _ := query.Parse(query.Observations, nil)
		n, err := db.Count(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 3000 {
		t.Fatalf("%d observations", n)
	}
	key2, err := odata.EnsureDemo(ctx, db, 3000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3000 {
		t.Fatalf("a second EnsureDemo changed the data: %d observations", n)
	}
	if _, ok, _ := db.CheckKey(ctx, key1); ok {
		t.Fatal("the previous demo key is still active")
	}
	if _, ok, _ := db.CheckKey(ctx, key2); !ok || key1 == key2 {
		t.Fatal("the new demo key is not active")
	}
}

// odata uses the rate limit engine's public API only; it never depends on
// transport or cmd (DESIGN.md: dependencies point one way).
func TestLayering(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/sluicehq/sluice/odata/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/sluicehq/sluice/transport") || strings.HasPrefix(dep, "github.com/sluicehq/sluice/cmd") {
			t.Errorf("odata depends on %s", dep)
		}
	}
}
