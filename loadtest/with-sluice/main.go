package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

func main() {
	harness.LogAs("with-sluice")
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
	sc, err := harness.NewScenario("with", bin, backend)
	if err != nil {
		return 1, err
	}
	defer sc.Close()
	cfg := sc.Sluice
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
	code, runErr := harness.RunCommand(ctx, argv, repl,
		[]string{"SLUICE_GRPC_ADDR=" + s.GRPC, "SLUICE_HTTP_ADDR=" + s.HTTP, "SLUICE_DEBUG_ADDR=" + s.Debug}, timeout)
	stopErr := s.Stop(15 * time.Second)
	if stopErr != nil {
		log.Printf("sluice log tail:\n%s", s.LogTail(20))
	}
	return code, errors.Join(runErr, stopErr)
}
