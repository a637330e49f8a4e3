package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("with-sluice: ")
	bin := flag.String("sluice", "bin/sluice", "sluice binary")
	backend := flag.String("backend", "memory", "memory or redis (a redis-server is started on a loopback port)")
	rules := flag.String("rules", "loadtest/rules/loadtest.yaml", "rule file to load")
	timeout := flag.Duration("timeout", 5*time.Minute, "longest the command may run")
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: with-sluice [flags] -- command [args...]")
	}
	code, err := run(*bin, *backend, *rules, *timeout, flag.Args())
	if err != nil {
		log.Print(err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(bin, backend, rules string, timeout time.Duration, argv []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "sluice-with-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	tb := testenv.NewProgramTB(work)
	defer tb.RunCleanups()

	cfg := testenv.DefaultSluiceConfig(filepath.Join(work, "runtime"))
	cfg.Bin, cfg.Backend = bin, backend
	cfg.LogPath = filepath.Join(work, "sluice.log")
	if backend == "redis" {
		r := testenv.StartRedis(tb, testenv.RedisOptions{})
		if err := tb.Err(); err != nil {
			return 1, err
		}
		cfg.RedisAddr = r.Addr
	}
	y, err := os.ReadFile(rules)
	if err != nil {
		return 1, err
	}
	if err := testenv.WriteRules(cfg, filepath.Base(rules), string(y)); err != nil {
		return 1, err
	}
	s, err := testenv.StartSluice(ctx, cfg)
	if err != nil {
		return 1, err
	}
	log.Printf("sluice (%s) grpc %s http %s debug %s", backend, s.GRPC, s.HTTP, s.Debug)

	repl := strings.NewReplacer("{grpc}", s.GRPC, "{http}", s.HTTP, "{debug}", s.Debug)
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = repl.Replace(a)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "SLUICE_GRPC_ADDR="+s.GRPC, "SLUICE_HTTP_ADDR="+s.HTTP, "SLUICE_DEBUG_ADDR="+s.Debug)
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()

	stopErr := s.Stop(15 * time.Second)
	if stopErr != nil {
		log.Printf("sluice log tail:\n%s", s.LogTail(20))
	}
	var exit *exec.ExitError
	switch {
	case cctx.Err() != nil && ctx.Err() == nil:
		return 1, fmt.Errorf("%s ran past -timeout %s and was killed", args[0], timeout)
	case errors.As(runErr, &exit):
		return exit.ExitCode(), errors.Join(fmt.Errorf("%s: %w", args[0], runErr), stopErr)
	case runErr != nil:
		return 1, errors.Join(runErr, stopErr)
	}
	return 0, stopErr
}
