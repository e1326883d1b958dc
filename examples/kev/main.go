// Command kev runs Kev decision models from the command line.
//
// Usage:
//
//	kev <command> [flags]
//
// Each command lives in its own file and registers itself in commands from its init function; "kev help" lists
// them. Without -checkpoint, commands load the small random test checkpoint built into the binary:
//
//	go run ./examples/kev ask < examples/kev/testdata/request.json
//
// Exit status: 0 on success, 1 when the command fails, 2 for a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// commands maps a command name to its function, which receives the arguments after the name. Each command file
// registers itself here from its init function.
var commands = map[string]func(args []string) error{}

// summaries holds a one-line description per command for the usage text (optional).
var summaries = map[string]string{}

// The command's standard streams; tests replace them.
var (
	stdin  io.Reader = os.Stdin
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

// usageError marks a mistake in the command line: the command prints it with the usage text and exits with 2.
type usageError struct {
	msg      string
	reported bool // already printed (by the flag package)
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error.
func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

func main() { os.Exit(run(os.Args[1:])) }

// run dispatches a command line and returns the exit status.
func run(args []string) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "kev: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	err := cmd(args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if !ue.reported {
			fmt.Fprintf(stderr, "kev %s: %s\n", name, errorText(err))
		}
		return 2
	}
	fmt.Fprintf(stderr, "kev %s: %s\n", name, errorText(err))
	return 1
}

// errorText is an error's message without the library's own "kev: " prefix, which the command's "kev <command>: "
// already says.
func errorText(err error) string {
	return strings.TrimPrefix(err.Error(), "kev: ")
}

func usage(w io.Writer) {
	fmt.Fprint(w, `kev runs Kev decision models: calibrated answers to typed questions about a text.

Usage:

	kev <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "\t%-8s %s\n", n, summaries[n])
	}
	fmt.Fprint(w, `
"kev <command> -h" describes a command's flags; "kev -version" is "kev version". Without -checkpoint, commands
load the small random test checkpoint built into the binary (its answers are exact but meaningless), so from the
repository root

	go run ./examples/kev ask < examples/kev/testdata/request.json

answers a request with nothing else installed. A real checkpoint is a directory (head.pt and the LoRA adapter
or full weights) or a hub name such as jaredpalmer/kev-4b.
`)
}

// newFlags returns a flag set for a command that reports errors instead of exiting.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("kev "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kev %s %s\n\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors and refusing stray arguments.
// parseInput parses flags that may come before and after one optional input path, which it returns ("" when
// none was given).
func parseInput(fs *flag.FlagSet, args []string) (string, error) {
	var input string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", err
			}
			return "", &usageError{msg: err.Error(), reported: true}
		}
		if fs.NArg() == 0 {
			return input, nil
		}
		if input != "" {
			return "", usagef("more than one input: %q and %q", input, fs.Arg(0))
		}
		input, rest = fs.Arg(0), fs.Args()[1:]
	}
}

// readInput reads the input path, or standard input for "" and "-".
func readInput(input string) ([]byte, error) {
	if input == "" || input == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(input)
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{msg: err.Error(), reported: true}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
