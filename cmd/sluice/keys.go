package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/sluicehq/sluice/odata/sqlstore"
)

// keysUsage is the help of `sluice keys`.
const keysUsage = `usage: sluice keys <command> [-db DSN] [args]

commands:
  add NAME          create a key; its secret is printed once (only its SHA-256 is stored)
  list              list keys: id, name, creation and revocation times (never secrets)
  revoke ID|NAME    revoke the active keys with that id or name (403 from then on)

flags (before or after the arguments):
  -db DSN           store: "postgres://user@host/db" or "sqlite:/path/file.sqlite" (default ` + defaultODataDB + `)

environment:
  SLUICE_DB         the store when -db is not given
  SLUICE_DB_FILE    a file holding the store's URL (a mounted secret)
`

func runKeys(args []string) error {
	return runKeysTo(os.Stdout, args)
}

func runKeysTo(out io.Writer, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, keysUsage)
		return usagef("no keys command given (add, list, revoke)")
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(out, keysUsage)
		return nil
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), keysUsage) }
	switch sub {
	case "add", "list", "revoke":
	default:
		return usagef("unknown keys command %q (add, list, revoke; see sluice keys --help)", sub)
	}
	db := dbFlag(fs)
	if err := parseWithDB(fs, args[1:], db); err != nil {
		return err
	}
	// Each command checks its arguments before the store is opened.
	var run func(ctx context.Context, store *sqlstore.DB) error
	switch sub {
	case "add":
		if fs.NArg() != 1 {
			return usagef("usage: sluice keys add [-db DSN] NAME")
		}
		run = func(ctx context.Context, store *sqlstore.DB) error {
			secret, k, err := store.AddKey(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "key %s (%s) created. Its secret is shown only now:\n%s\n", k.ID, k.Name, secret)
			return nil
		}
	case "list":
		if fs.NArg() != 0 {
			return usagef("usage: sluice keys list [-db DSN]")
		}
		// Listing only reads: a store that does not exist is an error,
		// never created.
		return withStoreReadOnly(*db, func(ctx context.Context, store *sqlstore.DB) error { return listKeys(ctx, out, store) })
	case "revoke":
		if fs.NArg() != 1 {
			return usagef("usage: sluice keys revoke [-db DSN] ID|NAME")
		}
		run = func(ctx context.Context, store *sqlstore.DB) error {
			n, err := store.RevokeKey(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("no active key has the id or name %q", fs.Arg(0))
			}
			fmt.Fprintf(out, "revoked %d key(s)\n", n)
			return nil
		}
	}
	return withStore(*db, run)
}

// listKeys prints the keys as a table, oldest first.
func listKeys(ctx context.Context, out io.Writer, store *sqlstore.DB) error {
	keys, err := store.ListKeys(ctx)
	if err != nil {
		return err
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].CreatedAt < keys[j].CreatedAt })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := k.RevokedAt
		if revoked == "" {
			revoked = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Name, k.CreatedAt, revoked)
	}
	return tw.Flush()
}
