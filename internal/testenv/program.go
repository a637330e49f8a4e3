package testenv

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
)

// ProgramTB lets a program use internal/testenv, whose helpers take a small
// testing.TB. Fatalf and Skipf do not exit: testenv returns right after
// calling them, so the program checks Err and runs Cleanup itself, which
// keeps every started server stopped on the way out.
type ProgramTB struct {
	dir string

	mu       sync.Mutex
	cleanups []func()
	err      error
	n        int
}

// NewProgramTB keeps the helpers' temporary directories under dir.
func NewProgramTB(dir string) *ProgramTB { return &ProgramTB{dir: dir} }

// Helper is a no-op: there is no test log to attribute lines to.
func (t *ProgramTB) Helper() {}

// Logf logs through the standard logger.
func (t *ProgramTB) Logf(format string, args ...any) { log.Printf(format, args...) }

// Cleanup registers fn to run, last registered first, in RunCleanups.
func (t *ProgramTB) Cleanup(fn func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, fn)
	t.mu.Unlock()
}

// Fatalf records the first failure; see Err.
func (t *ProgramTB) Fatalf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = fmt.Errorf(format, args...)
	}
}

// Skipf is a failure too: a program that was asked to run against a server
// cannot pass without it.
func (t *ProgramTB) Skipf(format string, args ...any) { t.Fatalf(format, args...) }

// TempDir returns a new directory under the program's work directory.
func (t *ProgramTB) TempDir() string {
	t.mu.Lock()
	t.n++
	d := filepath.Join(t.dir, fmt.Sprintf("tmp%d", t.n))
	t.mu.Unlock()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return d
}

// Err is the first failure reported by a helper, or nil.
func (t *ProgramTB) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// RunCleanups runs the registered cleanups once, newest first.
func (t *ProgramTB) RunCleanups() {
	t.mu.Lock()
	fns := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
