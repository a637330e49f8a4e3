package housekeeping

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sizedPackages are the trees (relative to the module root) whose
// non-test Go files are held to maxFileLines and whose functions to
// maxFuncLines: every tree of Go code in the module.
var sizedPackages = []string{"engine", "actors", "transport", "odata", "cmd", "bench", "loadtest", "internal", "deploy"}

const (
	maxFileLines = 600
	maxFuncLines = 80
)

// TestFileAndFunctionSize fails on a non-test Go file over maxFileLines
// lines, or a function (or method) over maxFuncLines lines, in
// sizedPackages. Generated files are skipped.
func TestFileAndFunctionSize(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range sizedPackages {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			checkFile(t, root, path)
			return nil
		})
		if err != nil {
			t.Fatalf("walking %s: %v", dir, err)
		}
	}
}

func checkFile(t *testing.T, root, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if ast.IsGenerated(f) {
		return
	}
	rel, _ := filepath.Rel(root, path)
	if n := fset.Position(f.End()).Line; n > maxFileLines {
		t.Errorf("%s: %d lines, more than %d", rel, n, maxFileLines)
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		from, to := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if n := to - from + 1; n > maxFuncLines {
			t.Errorf("%s:%d: %s is %d lines, more than %d", rel, from, funcName(fn), n, maxFuncLines)
		}
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
