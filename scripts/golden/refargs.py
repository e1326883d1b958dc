"""torch_reference.py's command line, apart from the script so that it can be checked without torch:

    python3 scripts/golden/test_refargs.py

On CUDA (the default) the flags and their defaults are those the GPU scripts have always passed: 20 timed runs after
3 warm-ups, bf16 timed, fp32 computed for parity; --dtype, --threads and --check-max-tokens are CPU flags. On the
CPU (--device cpu) one run measures one dtype (fp32: the merged model in fp32; bf16: the merged model cast to bf16)
with --threads intra-op and inter-op threads, 5 timed runs after 1 warm-up unless told otherwise.
"""

import argparse
from pathlib import Path

DEVICES = ("cuda", "cpu")
DTYPES = ("fp32", "bf16")
DEFAULTS = {"cuda": {"reps": 20, "warmup": 3}, "cpu": {"reps": 5, "warmup": 1}}
CPU_CHECK_MAX_TOKENS = 512  # CPU: cached form checked against full rows on the cases whose state is this short


class ArgError(ValueError):
    """A flag combination the script refuses, with the reason."""


def parser(description=None):
    """The argument parser (description: the script's docstring)."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", type=Path)
    ap.add_argument("--cases", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", "--runs", dest="reps", type=int, default=None,
                    help="timed runs of each kind per case (default 20 on cuda, 5 on cpu)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed runs of each kind per case first (default 3 on cuda, 1 on cpu)")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="wall-clock budget for the whole run; the timing loops shrink to fit it")
    ap.add_argument("--device", choices=DEVICES, default="cuda",
                    help="cuda (default): bf16 timed, fp32 for parity; cpu: one --dtype timed on the host")
    ap.add_argument("--dtype", choices=DTYPES, default=None,
                    help="cpu only: fp32 (default; the merged model in fp32) or bf16 (the merged model cast to bf16)")
    ap.add_argument("--threads", type=int, default=0,
                    help="cpu only: torch.set_num_threads and set_num_interop_threads (default: torch's choice)")
    ap.add_argument("--case", action="append", default=[], metavar="NAME|N",
                    help="cpu only: run this case only (its name, or its 1-based index in the cases file); repeatable")
    ap.add_argument("--check-max-tokens", type=int, default=None,
                    help="cpu only: check the cached form against full rows on cases whose state has at most this many "
                         f"tokens (default {CPU_CHECK_MAX_TOKENS}; full rows of a long state cost a request per question)")
    return ap


def parse(argv=None, description=None):
    """Parses and checks argv; defaults filled in for the device. Bad combinations exit with status 2 and a message."""
    ap = parser(description)
    args = ap.parse_args(argv)
    try:
        check(args)
    except ArgError as e:
        ap.error(str(e))
    return args


def check(args):
    """Fills in device defaults and refuses what does not apply; raises ArgError."""
    d = DEFAULTS[args.device]
    if args.reps is None:
        args.reps = d["reps"]
    if args.warmup is None:
        args.warmup = d["warmup"]
    if args.reps < 1:
        raise ArgError(f"--reps {args.reps}: want at least 1")
    if args.warmup < 0:
        raise ArgError(f"--warmup {args.warmup}: want 0 or more")
    if args.budget_s <= 0:
        raise ArgError(f"--budget-s {args.budget_s}: want a positive number of seconds")
    if args.device == "cuda":
        for flag, given in (("--dtype", args.dtype is not None), ("--threads", args.threads != 0),
                            ("--case", bool(args.case)), ("--check-max-tokens", args.check_max_tokens is not None)):
            if given:
                raise ArgError(f"{flag} applies to --device cpu only (on cuda bf16 is timed and fp32 computed for parity)")
        return args
    if args.dtype is None:
        args.dtype = "fp32"
    if args.threads < 0:
        raise ArgError(f"--threads {args.threads}: want 0 (torch's choice) or a positive number")
    if args.check_max_tokens is None:
        args.check_max_tokens = CPU_CHECK_MAX_TOKENS
    if args.check_max_tokens < 0:
        raise ArgError(f"--check-max-tokens {args.check_max_tokens}: want 0 or more")
    return args


def select_cases(names, wanted):
    """The case names to run, in the file's order: all for an empty wanted, else those named or numbered (1-based)."""
    if not wanted:
        return list(names)
    keep = set()
    for w in wanted:
        if w in names:
            keep.add(w)
        elif w.isdigit() and 1 <= int(w) <= len(names):
            keep.add(names[int(w) - 1])
        else:
            raise ArgError(f"--case {w!r}: not a case name nor an index 1..{len(names)} of {names}")
    return [n for n in names if n in keep]
