package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// usageError is a command line the command cannot run: main exits 2, as the
// flag package's own errors do, after printing it (the flag package has
// already printed its own).
type usageError struct {
	err     error
	printed bool // the flag package has printed it with the usage
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// usagef is a usage error with its message still to print.
func usagef(format string, a ...any) error {
	return usageError{err: fmt.Errorf(format, a...)}
}

// envVar is one environment variable that a command's -h names.
type envVar struct{ name, def, meaning string }

// rateLimitEnv are the variables a newcomer to the rate limit service needs
// first; docs/configuration.md has all of them.
var rateLimitEnv = []envVar{
	{"BACKEND_TYPE", "redis", "redis, memcache or memory (embedded: no server needed)"},
	{"REDIS_SOCKET_TYPE", "unix", "unix or tcp"},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "Redis address (host:port with REDIS_SOCKET_TYPE=tcp)"},
	{"MEMCACHE_HOST_PORT", "", "memcache servers (BACKEND_TYPE=memcache)"},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", "rule files root"},
	{"RUNTIME_SUBDIRECTORY", "", "rule files are in RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config"},
	{"RUNTIME_WATCH_ROOT", "true", "reload on a symlink swap of the root (false: on any change)"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", "true: /healthcheck fails while no rules (no domain) are loaded"},
	{"PORT, GRPC_PORT, DEBUG_PORT", "8080, 8081, 6070", "HTTP (/json, /healthcheck), gRPC and debug ports"},
	{"HOST, GRPC_HOST, DEBUG_HOST", "0.0.0.0", "their listen addresses"},
	{"USE_STATSD", "true", "send statistics to STATSD_HOST:STATSD_PORT (false: print them)"},
	{"USE_PROMETHEUS", "false", "serve Prometheus metrics on PROMETHEUS_ADDR"},
	{"SLUICE_GRPC_SERVER", "native", "native or grpc-go"},
	{"LOG_LEVEL, LOG_FORMAT", "WARN, text", "logging"},
}

// storeEnv are the variables of the commands that open an OData store.
var storeEnv = []envVar{
	{"SLUICE_DB", "", "the store when -db is not given"},
	{"SLUICE_DB_FILE", "", "a file holding the store's URL (a mounted secret)"},
}

// newFlagSet is a command's flag set: -h prints the usage line, the flags
// with their defaults and the environment variables env, to standard
// output.
func newFlagSet(name, synopsis string, env ...[]envVar) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: sluice %s\n", synopsis)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
		var vars []envVar
		for _, e := range env {
			vars = append(vars, e...)
		}
		printEnv(w, vars)
	}
	return fs
}

func printEnv(w io.Writer, vars []envVar) {
	if len(vars) == 0 {
		return
	}
	fmt.Fprintln(w, "\nenvironment (all of them: docs/configuration.md):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, v := range vars {
		def := v.def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.name, def, v.meaning)
	}
	tw.Flush()
}

// parseFlags parses args with flags and positional arguments in any order
// (`keys revoke tester -db X`); "--" ends the flags. -h prints the usage to
// standard output and returns flag.ErrHelp (exit 0); a bad flag is a
// usageError (exit 2). The positional arguments are then fs.Args().
func parseFlags(fs *flag.FlagSet, args []string) error {
	var help strings.Builder
	fs.SetOutput(&help)
	defer fs.SetOutput(nil)
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, help.String())
			return err
		}
		if err != nil {
			fmt.Fprint(os.Stderr, help.String())
			return usageError{err: err, printed: true}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parse again with only the positional arguments after "--", so that
	// fs.Args() returns them; the flags set above stay set.
	return fs.Parse(append([]string{"--"}, positional...))
}

// runVersion prints the build: module version, VCS revision and time, Go
// version.
func runVersion(args []string) error {
	fs := newFlagSet("version", "version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version takes no arguments")
	}
	fmt.Println(versionLine())
	return nil
}

// version is set by the build (make build: -ldflags -X main.version=...)
// where the toolchain's own VCS stamp may be missing (a git worktree, a
// source tree without .git).
var version string

// versionLine is one line describing this binary, from the build
// information the Go toolchain embeds.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "sluice " + version + " (no build information)"
	}
	v := version
	if v == "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	s := "sluice " + v
	var rev, when, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			when = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		s += " " + rev + modified
	}
	if when != "" {
		s += " " + when
	}
	return s + " " + info.GoVersion
}
