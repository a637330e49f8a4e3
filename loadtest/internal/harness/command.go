package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// RunCommand runs argv, each argument with repl's placeholders replaced,
// with env added to this program's and our standard streams; it is killed
// after timeout. It returns the command's exit status (1 when it has none)
// and why it failed. with-sluice and with-odata run their command so.
func RunCommand(ctx context.Context, argv []string, repl *strings.Replacer, env []string, timeout time.Duration) (int, error) {
	if len(argv) == 0 {
		return 1, errors.New("harness: no command to run")
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = repl.Replace(a)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case cctx.Err() != nil && ctx.Err() == nil:
		return 1, fmt.Errorf("%s ran past -timeout %s and was killed", args[0], timeout)
	case errors.As(err, &exit):
		return exit.ExitCode(), fmt.Errorf("%s: %w", args[0], err)
	case err != nil:
		return 1, err
	}
	return 0, nil
}
