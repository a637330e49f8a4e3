// Command sluice is the rate limit service and the OData API in one binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// registerCommand adds a subcommand. Files of this package call it from init,
// so each area of the program keeps its own command-line code.
func registerCommand(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("sluice: command registered twice: " + name) // programming error at init, not a runtime error
	}
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sluice <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].summary)
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
	cmd, ok := commands[name]
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
