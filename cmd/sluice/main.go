// Command sluice is the rate limit service and the OData API in one binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
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
		{"proto", "write the rate limit services' .proto files (or a protoset) for ghz, grpcurl and k6", runProto},
		{"version", "print the version and build information (also: sluice --version)", runVersion},
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

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice <command> [flags] [arguments]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nsluice <command> -h lists the command's flags and environment variables.")
}

func main() {
	os.Exit(runMain(os.Args))
}

// runMain runs the command args name and returns the exit status: 0, 1 for
// a failure, 2 for a command line that cannot run.
func runMain(args []string) int {
	if len(args) < 2 {
		usage(os.Stderr)
		return 2
	}
	name := args[1]
	switch name {
	case "-h", "-help", "--help", "help":
		usage(os.Stdout)
		return 0
	case "-version", "--version":
		fmt.Println(versionLine())
		return 0
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", name)
		usage(os.Stderr)
		return 2
	}
	return exitStatus(name, cmd.run(args[2:]))
}

// exitStatus reports err as the command's end and returns the exit status.
func exitStatus(name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code) // the command has printed its own message
	}
	var ue usageError
	if errors.As(err, &ue) {
		if !ue.printed {
			fmt.Fprintf(os.Stderr, "sluice %s: %v\n", name, err)
		}
		return 2
	}
	fmt.Fprintf(os.Stderr, "sluice %s: %v\n", name, err)
	return 1
}

// exitCode ends the program with that status and no further message: the
// command has already printed what the reference's tool prints.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
