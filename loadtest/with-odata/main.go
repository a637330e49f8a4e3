package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/loadtest/internal/harness"
	"github.com/sluicehq/sluice/loadtest/internal/odataserver"
)

func main() {
	harness.LogAs("with-odata")
	rows := flag.Int("rows", 20000, "rows of generated data")
	nkeys := flag.Int("keys", 4, "API keys to create")
	timeout := flag.Duration("timeout", 10*time.Minute, "longest the command may run")
	bin := flag.String("sluice", "bin/sluice", "the sluice binary that serves the OData API")
	flag.Parse()
	if flag.NArg() == 0 || *rows < 1 || *nkeys < 1 {
		log.Fatal("usage: with-odata [-rows n] [-keys n] -- command [args...]")
	}
	code, err := run(*bin, *rows, *nkeys, *timeout, flag.Args())
	if err != nil {
		log.Print(err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(bin string, rows, nkeys int, timeout time.Duration, argv []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := odataserver.Start(bin, rows, nkeys, 2) // the real per-key limit, so clients meet 429s
	if err != nil {
		return 1, err
	}
	defer srv.Stop()
	keys := strings.Join(srv.Keys, ",")
	log.Printf("OData (sluice odata) at %s with %d rows and %d keys", srv.Root, rows, len(srv.Keys))
	repl := strings.NewReplacer("{url}", srv.Root, "{keys}", keys)
	return harness.RunCommand(ctx, argv, repl, []string{"ODATA_URL=" + srv.Root, "ODATA_KEYS=" + keys}, timeout)
}
