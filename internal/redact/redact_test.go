package redact

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://user:s3cret@db.example:5432/odata", "postgres://user:xxxxx@db.example:5432/odata"},
		{"-db=postgresql://u:p%40ss@h/d?sslmode=require", "-db=postgresql://u:xxxxx@h/d?sslmode=require"},
		{"postgres://user:pa@ss@h/d", "postgres://user:xxxxx@h/d"},
		{"postgres://user:pa:ss@h/d", "postgres://user:xxxxx@h/d"},
		{"postgres://user@h/d", "postgres://user@h/d"},
		{"postgres://h/d?user=u&password=s3cret&sslmode=disable", "postgres://h/d?user=u&password=xxxxx&sslmode=disable"},
		{"host=h user=u password=s3cret dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password='s3 cret' dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h PASSWORD = s3cret", "host=h PASSWORD = xxxxx"},
		{"sslpassword=k3y", "sslpassword=xxxxx"},
		{"sqlite:var/odata.sqlite", "sqlite:var/odata.sqlite"},
		{"open postgres://a:b@h/d: connection refused", "open postgres://a:xxxxx@h/d: connection refused"},
		{"http://127.0.0.1:8080/json", "http://127.0.0.1:8080/json"},
		{"", ""},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestArgs(t *testing.T) {
	in := []string{"sluice", "serve", "-db", "postgres://u:topsecret@h/d"}
	got := Args(in)
	if strings.Contains(strings.Join(got, " "), "topsecret") || got[3] != "postgres://u:xxxxx@h/d" || got[1] != "serve" {
		t.Errorf("Args = %q", got)
	}
	if in[3] != "postgres://u:topsecret@h/d" {
		t.Error("Args changed its input")
	}
}

// FuzzString: whatever the text, a password written as user:PASSWORD@ or
// password=PASSWORD does not survive.
func FuzzString(f *testing.F) {
	f.Add("postgres://user:secretvalue@h/d", "secretvalue")
	f.Add("host=h password=secretvalue", "secretvalue")
	f.Fuzz(func(t *testing.T, prefix, pw string) {
		if len(pw) < 4 || strings.ContainsAny(pw, " \t\n\r\v\f/@&'=\\:") || strings.Contains(Mask, pw) {
			return
		}
		for _, s := range []string{
			prefix + " postgres://user:" + pw + "@host/db",
			prefix + " host=h password=" + pw + " dbname=d",
		} {
			out := String(s)
			if strings.Contains(out, pw) && !strings.Contains(String(prefix), pw) {
				t.Fatalf("String(%q) = %q keeps the password", s, out)
			}
		}
	})
}
