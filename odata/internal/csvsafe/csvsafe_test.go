package csvsafe

import "testing"

func TestFormula(t *testing.T) {
	for cell, want := range map[string]bool{
		"":                                   false,
		"pH":                                 false,
		"=HYPERLINK(\"http://x\",\"click\")": true,
		"=1+1":                               true,
		"+1+1":                               true,
		"-1+1":                               true,
		"@SUM(A1)":                           true,
		"\tcmd":                              true,
		"\r=1":                               true,
		"-0.25":                              false,
		"+3":                                 false,
		"-1e-3":                              false,
		"-":                                  true,
		"--":                                 true,
		"-Inf":                               true,
		"-NaN":                               true,
		"- sample lost":                      true,
		"a=b":                                false,
		"'=1":                                false,
	} {
		if got := Formula([]byte(cell)); got != want {
			t.Errorf("%q: %v, want %v", cell, got, want)
		}
	}
}

func FuzzFormula(f *testing.F) {
	for _, s := range []string{"=1", "-0.25", "+", "@", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Formula([]byte(s)) && len(s) > 0 && s[0] != '=' && s[0] != '@' && s[0] != '\t' && s[0] != '\r' && s[0] != '+' && s[0] != '-' {
			t.Fatalf("%q is not a formula", s)
		}
		if len(s) > 0 && (s[0] == '=' || s[0] == '@') && !Formula([]byte(s)) {
			t.Fatalf("%q is a formula", s)
		}
	})
}
