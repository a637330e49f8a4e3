package doctest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file    string
	line    int // of the opening fence, 1-based
	lang    string
	body    string
	skip    string // the reason, when marked skip
	timeout time.Duration
}

const defaultTimeout = time.Minute

// hungAfter is how many times a block's time (the default or its marker:
// what it needs on a quiet machine, with room) the test waits before it
// calls the block hung. The bound catches an example that never ends, not
// a slow machine: under make test-stress a three-minute block (go run of
// a load test, compiled under the load) overran its three minutes twice.
const hungAfter = 5

var marker = regexp.MustCompile(`^<!--\s*doc-test:\s*(.*?)\s*-->$`)

// shellLangs are the info strings whose blocks run.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true}

// parse returns the fenced blocks of a Markdown text, each with the
// doc-test marker on the last non-blank line before it. A block without a
// language, or a marker that does not parse, is an error: an unlabelled
// block could be a shell example nobody runs.
func parse(file, text string) ([]block, error) {
	var out []block
	var errs []error
	lines := strings.Split(text, "\n")
	prev := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		fence, info, ok := openFence(l)
		if !ok {
			if strings.TrimSpace(l) != "" {
				prev = strings.TrimSpace(l)
			}
			continue
		}
		b := block{file: file, line: i + 1, lang: info, timeout: defaultTimeout}
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == fence {
				closed = true
				break
			}
			body = append(body, lines[i])
		}
		if !closed {
			errs = append(errs, fmt.Errorf("%s:%d: the fence is never closed", file, b.line))
			break
		}
		b.body = strings.Join(body, "\n") + "\n"
		if info == "" {
			errs = append(errs, fmt.Errorf("%s:%d: a fenced block without a language (sh, text, yaml, …)", file, b.line))
		}
		if m := marker.FindStringSubmatch(prev); m != nil {
			if err := b.mark(m[1]); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", file, b.line, err))
			}
		}
		out = append(out, b)
		prev = ""
	}
	return out, errors.Join(errs...)
}

// openFence reports whether l opens a fenced block (``` at the start of
// the line), with the closing fence and the info string's first word.
func openFence(l string) (fence, info string, ok bool) {
	if !strings.HasPrefix(l, "```") {
		return "", "", false
	}
	n := len(l) - len(strings.TrimLeft(l, "`"))
	f := strings.Fields(l[n:])
	if len(f) > 0 {
		info = f[0]
	}
	return l[:n], info, true
}

var skipRe = regexp.MustCompile(`^skip\s*\((.+)\)$`)
var timeoutRe = regexp.MustCompile(`^timeout\s+(\S+)$`)

func (b *block) mark(m string) error {
	if !shellLangs[b.lang] {
		return fmt.Errorf("doc-test marker %q on a %q block, which never runs", m, b.lang)
	}
	if s := skipRe.FindStringSubmatch(m); s != nil {
		b.skip = strings.TrimSpace(s[1])
		return nil
	}
	if s := timeoutRe.FindStringSubmatch(m); s != nil {
		d, err := time.ParseDuration(s[1])
		if err != nil || d <= 0 || d > 5*time.Minute {
			return fmt.Errorf("doc-test timeout %q: want a duration up to 5m", s[1])
		}
		b.timeout = d
		return nil
	}
	return fmt.Errorf("doc-test marker %q: want skip (reason) or timeout DURATION", m)
}

// run runs a shell block in dir with env; its output comes back for the
// failure message. The block's process group is killed at the timeout, so
// a server an example leaves running does not outlive it.
func run(ctx context.Context, b block, dir string, env []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, hungAfter*b.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", b.body)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v (%d times its %v): %w", hungAfter*b.timeout, hungAfter, b.timeout, err)
	}
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left behind
	}
	return out.Bytes(), err
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no repository root at %s: %v", root, err)
	}
	return root
}

// docs are the Markdown files whose examples run.
func docs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "loadtest", "README.md")}, files...)
}

// scratch is a directory that looks like the repository: a symlink to each
// top-level entry except bin and var, the build's outputs.
func scratch(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == "var" || e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// gopathBin is where `go install` (and so `make helm`, `make ghz`) puts
// tools.
func gopathBin(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env GOPATH: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin")
}

func TestDocExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs the docs' examples")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	root := repoRoot(t)
	var blocks []block
	for _, f := range docs(t, root) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		bs, err := parse(rel, string(text))
		if err != nil {
			t.Error(err)
		}
		blocks = append(blocks, bs...)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "sluice"), "./cmd/sluice")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+gopathBin(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	ran := 0
	for _, b := range blocks {
		if !shellLangs[b.lang] {
			continue
		}
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			if b.skip != "" {
				t.Skip(b.skip)
			}
			ran++
			out, err := run(context.Background(), b, scratch(t, root), env)
			if err != nil {
				t.Errorf("%v\n--- the block:\n%s--- its output:\n%s", err, b.body, tail(out, 40))
			}
		})
	}
	if ran == 0 {
		t.Error("no example ran: the docs have no runnable sh block")
	}
}

// tail is the last n lines of out.
func tail(out []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
