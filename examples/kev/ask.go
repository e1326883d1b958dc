package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/tensor"
)

func init() {
	commands["ask"] = askCommand
	summaries["ask"] = "answer one System One request read from a file or standard input"
}

// modelFlags are the flags every command that loads a model shares.
type modelFlags struct {
	checkpoint, base, device, dtype string
	offline                         bool
	passTokens, cudaGraphs          int
}

func (m *modelFlags) register(fs interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
	IntVar(p *int, name string, value int, usage string)
}) {
	fs.StringVar(&m.checkpoint, "checkpoint", "", "Kev checkpoint: a directory or a hub name org/name[@revision] (default: the small random test checkpoint built into the command)")
	fs.StringVar(&m.base, "base", "", "base model: a directory or a hub name (default: head.pt's base at its revision)")
	fs.StringVar(&m.device, "device", "cpu", "tensor backend: "+deviceChoices())
	fs.StringVar(&m.dtype, "dtype", "", "weight and compute type: fp32 (cpu only) (bf16 products summed in fp32), fp16 (weights only; cpu only) or fp8 (FP8 E4M3 products: cuda on compute capability 9.0; check it with kev eval -compare bf16); default fp32 on cpu, bf16 elsewhere")
	fs.BoolVar(&m.offline, "offline", false, "never use the network; read hub models from the local cache only (HF_HUB_OFFLINE=1)")
	fs.IntVar(&m.passTokens, "pass-tokens", 0, "tokens one model pass takes, and one batch's budget (0: 16,384, Kev's)")
	fs.IntVar(&m.cudaGraphs, "cuda-graphs", 0, "with -device cuda: pass graphs each GPU keeps, -1 turns them off (0: KEV_CUDA_GRAPHS, else the backend's default)")
}

// deviceChoices lists the valid -device values: the backends compiled into this binary, and how to get cuda
// when it is not.
func deviceChoices() string {
	names := tensor.Backends()
	if !slices.Contains(names, "cuda") {
		return strings.Join(names, " or ") + " (cuda needs a binary built with -tags cuda)"
	}
	return strings.Join(names, ", ") + ", or cuda:N for the Nth GPU"
}

// options resolves the flags into Load's arguments; the checkpoint is "" when none was given (the bundled one).
func (m *modelFlags) options() (string, kev.Options) {
	return m.checkpoint, kev.Options{Base: m.base, Device: kev.Device(m.device), DType: kev.DType(m.dtype), Offline: m.offline,
		PassTokens: m.passTokens, CUDAGraphs: m.cudaGraphs}
}

// model is a loaded predictor; Close also removes the bundled checkpoint's temporary copy.
type model struct {
	*kev.Predictor
	bundled bool   // the bundled test checkpoint was loaded because none was given
	name    string // the checkpoint as the user knows it
	remove  func()
}

// Close closes the predictor and removes what loadModel unpacked.
func (m *model) Close() error {
	err := m.Predictor.Close()
	if m.remove != nil {
		m.remove()
		m.remove = nil
	}
	return err
}

// loadModel loads the checkpoint run with opts; run "" loads the bundled test checkpoint, unpacked into a
// temporary directory that Close removes (with opts.Base "" meaning its own base).
func loadModel(ctx context.Context, run string, opts kev.Options) (*model, error) {
	m := &model{name: run}
	if run == "" {
		dir, base, remove, err := bundledModel()
		if err != nil {
			return nil, err
		}
		run, m.bundled, m.name, m.remove = dir, true, "built-in test checkpoint "+bundledRun, remove
		if opts.Name == "" {
			opts.Name = bundledName // not the temporary directory, in the model card and metrics
		}
		if opts.Base == "" {
			opts.Base = base
		}
	}
	p, err := kev.Load(ctx, run, opts)
	if err != nil {
		if m.remove != nil {
			m.remove()
		}
		return nil, err
	}
	m.Predictor = p
	return m, nil
}

func askCommand(args []string) error {
	fs := newFlags("ask", "[-checkpoint DIR|NAME] [-base DIR|NAME] [-device cpu] [-dtype fp32] [-truncate-states] [request.json | -]")
	var mf modelFlags
	mf.register(fs)
	truncate := fs.Bool("truncate-states", false, "read only the first 65,536 tokens of a longer state instead of refusing it (the server's KEV_TRUNCATE_STATES=1)")
	input, err := parseInput(fs, args)
	if err != nil {
		return err
	}
	body, err := readInput(input)
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	// The library's reading of the body gives the readable message (the server answers Kev's 422 body instead).
	var checked kev.Request
	if err := checked.UnmarshalJSON(body); err != nil {
		if input != "" && input != "-" {
			return fmt.Errorf("%s: %w", input, err)
		}
		return err
	}
	req, err := systemone.DecodeRequest(body)
	if err != nil {
		return err
	}
	run, opts := mf.options()
	opts.TruncateStates = *truncate
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p, err := loadModel(ctx, run, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	if p.bundled {
		fmt.Fprintln(stderr, noCheckpointNote)
	}
	reportMemory(p.Info())
	resp, err := bridge.Predictor(p.Predictor).Do(ctx, req)
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

// requestError says why the model refused a request, and for a state over the limit the flag that reads its start.
func requestError(err error) error {
	var se *systemone.StateTooLongError
	if errors.As(err, &se) {
		return fmt.Errorf("%w; pass -truncate-states to read only its first %s tokens", se, thousands(se.Limit))
	}
	if detail, ok := systemone.AdmissionDetail(err); ok {
		return fmt.Errorf("request refused: %s", detail)
	}
	return err
}

// thousands writes n with commas between groups of three digits: 65,536.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
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
