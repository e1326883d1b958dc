package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
)

func init() {
	commands["ask"] = askCommand
	summaries["ask"] = "answer one System One request read from standard input"
}

// bundledRun and bundledBase are the test checkpoint shipped with the repository, relative to its root.
var (
	bundledRun  = filepath.Join("testdata", "golden", "tiny-a", "kev")
	bundledBase = filepath.Join("testdata", "golden", "tiny-a", "base")
)

// modelFlags are the flags every command that loads a model shares.
type modelFlags struct {
	checkpoint, base, device, dtype string
	offline                         bool
}

func (m *modelFlags) register(fs interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}) {
	fs.StringVar(&m.checkpoint, "checkpoint", "", "Kev checkpoint: a directory or a hub name org/name[@revision] (default: the bundled test checkpoint "+bundledRun+")")
	fs.StringVar(&m.base, "base", "", "base model: a directory or a hub name (default: head.pt's base; with the bundled checkpoint, "+bundledBase+")")
	fs.StringVar(&m.device, "device", "cpu", "tensor backend")
	fs.StringVar(&m.dtype, "dtype", "", "weight type: fp32, bf16 or fp16 (fp16: cpu only; default fp32 on cpu, bf16 elsewhere)")
	fs.BoolVar(&m.offline, "offline", false, "never use the network; read hub models from the local cache only")
}

// options resolves the flags into Load's arguments, finding the bundled checkpoint when none is given.
func (m *modelFlags) options() (string, kev.Options, error) {
	opts := kev.Options{Base: m.base, Device: kev.Device(m.device), DType: kev.DType(m.dtype), Offline: m.offline}
	run := m.checkpoint
	if run == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", opts, err
		}
		run = filepath.Join(root, bundledRun)
		if opts.Base == "" {
			opts.Base = filepath.Join(root, bundledBase)
		}
	}
	return run, opts, nil
}

// moduleRoot finds the repository holding the bundled checkpoint, from the current directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, bundledRun, "head.pt")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no -checkpoint given, and the bundled test checkpoint " + bundledRun +
				" is not in this directory or above it (run from the repository, or pass -checkpoint)")
		}
		dir = parent
	}
}

func askCommand(args []string) error {
	fs := newFlags("ask", "[-checkpoint DIR|NAME] [-base DIR|NAME] [-device cpu] [-dtype fp32] < request.json")
	var mf modelFlags
	mf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	body, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	req, err := systemone.DecodeRequest(body)
	if err != nil {
		return requestError(err)
	}
	run, opts, err := mf.options()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p, err := kev.Load(ctx, run, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	reportMemory(p.Info())
	resp, err := bridge.Predictor(p).Do(ctx, req)
	if err != nil {
		return requestError(err)
	}
	out, err := resp.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

// requestError turns a refused request into the body Kev's server would answer with.
func requestError(err error) error {
	var ve *systemone.ValidationError
	if errors.As(err, &ve) {
		if body, merr := ve.MarshalJSON(); merr == nil {
			return fmt.Errorf("invalid request (HTTP 422): %s", body)
		}
	}
	if detail, ok := systemone.AdmissionDetail(err); ok {
		return fmt.Errorf("request refused (HTTP 422): %s", detail)
	}
	return err
}

// reportMemory prints the weights the backend holds and the process's resident memory to standard error.
func reportMemory(info kev.Info) {
	msg := fmt.Sprintf("kev: %s weights on %s: %s", info.DType, info.Device, mib(info.WeightBytes))
	if rss := residentBytes(); rss > 0 {
		msg += fmt.Sprintf("; process resident %s", mib(rss))
	} else {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		msg += fmt.Sprintf("; Go heap %s", mib(int64(ms.HeapAlloc)))
	}
	fmt.Fprintln(stderr, msg)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// residentBytes reads the process's resident set size where the system reports it (Linux), else 0.
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n << 10
				}
			}
		}
	}
	return 0
}
