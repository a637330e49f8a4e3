package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The store can come from SLUICE_DB or SLUICE_DB_FILE instead of -db, so that
// its password is not on the command line; -db still wins.
func TestDBFromEnv(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "db-url")
	if err := os.WriteFile(secret, []byte("postgres://u:s3cret@h/d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"default", nil, nil, defaultODataDB, ""},
		{"flag", []string{"-db", "sqlite:x.sqlite"}, nil, "sqlite:x.sqlite", ""},
		{"env", nil, map[string]string{"SLUICE_DB": "postgres://u:p@h/d"}, "postgres://u:p@h/d", ""},
		{"file", nil, map[string]string{"SLUICE_DB_FILE": secret}, "postgres://u:s3cret@h/d", ""},
		{"flag wins", []string{"-db", "sqlite:x.sqlite"}, map[string]string{"SLUICE_DB": "postgres://u:p@h/d"}, "sqlite:x.sqlite", ""},
		{"both", nil, map[string]string{"SLUICE_DB": "a", "SLUICE_DB_FILE": secret}, "", "SLUICE_DB and SLUICE_DB_FILE are both set"},
		{"empty env", nil, map[string]string{"SLUICE_DB": " "}, "", "SLUICE_DB is set but empty"},
		{"missing file", nil, map[string]string{"SLUICE_DB_FILE": filepath.Join(dir, "nope")}, "", "SLUICE_DB_FILE: open"},
		{"empty file", nil, map[string]string{"SLUICE_DB_FILE": empty}, "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			db := dbFlag(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := dbFromEnv(fs, db, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case *db != tc.want:
				t.Fatalf("db %q, want %q", *db, tc.want)
			}
		})
	}
}

// A -db value of no known form (a password given in the wrong place, say)
// is refused without creating a file of that name or echoing it.
func TestDBOfNoKnownFormIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, err := openODataStore(context.Background(), "S3cr3tPW")
	if err == nil || strings.Contains(err.Error(), "S3cr3tPW") {
		t.Fatalf("openODataStore(S3cr3tPW): %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files created: %v", entries)
	}
}
