package housekeeping

import (
	"bytes"
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// git runs git in the module root; the test skips (loudly) outside a git
// checkout, e.g. in a source archive.
func git(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && strings.Contains(stderr.String(), "not a git repository") {
		t.Skip("not a git checkout")
	}
	return string(out), err
}

// ignored reports whether .gitignore ignores path (relative to root).
func ignored(t *testing.T, root, path string) bool {
	t.Helper()
	_, err := git(t, root, "check-ignore", "-q", "--no-index", path)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false
	default:
		t.Fatalf("git check-ignore %s: %v", path, err)
		return false
	}
}

// mainPackages returns the directories (relative to root) holding a
// package main.
func mainPackages(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if f.Name.Name == "main" && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestBuildOutputsIgnored fails when `go build` can write a binary git
// would pick up: a main package's default output (its directory's name, in
// the package's directory or the module root) must be ignored, the
// package's own directory must not be, and no tracked file is an
// executable (a 68 MB cmd/sluice/sluice once was).
func TestBuildOutputsIgnored(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dirs := mainPackages(t, root)
	if len(dirs) == 0 {
		t.Fatal("no main package found")
	}
	for _, dir := range dirs {
		base := filepath.Base(dir)
		for _, out := range []string{filepath.Join(dir, base), base} {
			if fi, err := os.Stat(filepath.Join(root, out)); err == nil && fi.IsDir() {
				continue // go build refuses to write over a directory
			}
			if !ignored(t, root, out) {
				t.Errorf("%s (go build's output for ./%s) is not in .gitignore", out, dir)
			}
		}
		if ignored(t, root, dir+"/") || ignored(t, root, filepath.Join(dir, "new.go")) {
			t.Errorf("%s: the package's own directory or sources are ignored", dir)
		}
	}
	files, err := git(t, root, "ls-files", "-z")
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(files, "\x00"), "\x00") {
		if isExecutable(filepath.Join(root, f)) {
			t.Errorf("%s is a tracked executable: remove it (git rm --cached) and ignore it", f)
		}
	}
}

// isExecutable reports whether path starts like an ELF, Mach-O or PE binary.
func isExecutable(path string) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false // deleted in the work tree: not our concern here
	}
	defer fh.Close()
	head := make([]byte, 4)
	if n, _ := fh.Read(head); n < 4 {
		return false
	}
	for _, magic := range [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z', 0x90, 0}} {
		if bytes.Equal(head, magic) {
			return true
		}
	}
	return false
}
