// Command sluice is the rate limit service and the OData API in one binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string) error
}

// commands lists every subcommand in one place, in the order usage prints
// them: the services first, then the tools.
func commands() []command {
	return []command{
		{"serve", "run the rate limit service and the OData API together", runServe},
		{"ratelimit", "run the rate limit service alone (settings from the environment)", runRateLimit},
		{"odata", "run the OData API alone (embedded SQLite demo unless -db is given)", runOData},
		{"client", "ask a rate limit service for one decision over gRPC", runClient},
		{"config-check", "validate rate limit YAML files: sluice config-check <file>...", runConfigCheck},
		{"config_check", "the reference's config checker: sluice config_check -config_dir DIR [-merge_domain_configs]", runConfigCheck},
		{"healthcheck", "exit 0 if the local service's /healthcheck answers 200 (for container health checks)", runHealthcheck},
		{"import", "load DataStream CSV files (+ a metadata JSON per dataset) into an OData store", runImport},
		{"generate", "fill an OData store with realistic generated data: sluice generate -rows N", runGenerate},
		{"keys", "manage OData API keys: sluice keys add NAME | list | revoke ID|NAME", runKeys},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sluice <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", c.name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		return
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code)) // the command has printed its own message
		}
		fmt.Fprintf(os.Stderr, "sluice %s: %v\n", name, err)
		os.Exit(1)
	}
}

// exitCode ends the program with that status and no further message: the
// command has already printed what the reference's tool prints.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
