package doctest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// filePath is a relative path with at least one directory and an extension
// of the kinds the docs cite.
var filePath = regexp.MustCompile(`(?:^|[^\w/.-])((?:\.\./|\./)?(?:[\w.-]+/)+[\w.-]+\.(?:md|go|js|yaml|json|csv|sh|mod))\b`)

// cited returns the file paths a text names.
func cited(text string) []string {
	var out []string
	for _, m := range filePath.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// A path the docs cite is a file of the repository: relative to the root,
// to the citing file, or the tail of a repository path (a file as a
// container sees it). The docs once cited spec files that live outside it.
func TestDocsCiteRepositoryFiles(t *testing.T) {
	root := repoRoot(t)
	var all []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "bin" || d.Name() == "var") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			all = append(all, "/"+filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Glob(filepath.Join(root, "loadtest", "k6", "*.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(docs(t, root), scripts...) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, p := range cited(string(text)) {
			if !exists(root, filepath.Dir(f), p, all) {
				t.Errorf("%s cites %s, which is not in the repository", rel, p)
			}
		}
	}
}

func exists(root, dir, p string, all []string) bool {
	for _, c := range []string{filepath.Join(root, p), filepath.Join(dir, p)} {
		// Inside the repository only: ../shared/… may exist on one
		// machine and in no checkout.
		if rel, err := filepath.Rel(root, c); err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		if _, err := os.Stat(c); err == nil {
			return true
		}
	}
	if strings.HasPrefix(p, ".") {
		return false
	}
	for _, a := range all {
		if strings.HasSuffix(a, "/"+p) {
			return true
		}
	}
	return false
}

func TestCited(t *testing.T) {
	for text, want := range map[string]string{
		"against the documented API (spec/odata-api.md, odata-compat.md)": "spec/odata-api.md",
		"`../shared/spec/envoy-rlqs.md` in the":                           "../shared/spec/envoy-rlqs.md",
		"see [x](../loadtest/README.md).":                                 "../loadtest/README.md",
		"a URL https://example.org/a/b.json":                              "",
		"no directory: odata-compat.md":                                   "",
	} {
		got := strings.Join(cited(text), ",")
		if got != want {
			t.Errorf("%q: cited %q, want %q", text, got, want)
		}
	}
}
