#!/usr/bin/env python3
"""The PyTorch serving reference on a Kev checkpoint: probabilities (bf16 as served, and fp32) and model latency for
the four request shapes of Kev's serving benchmark, for side-by-side parity and speed checks on the same GPU.

    PYTHONUNBUFFERED=1 python3 scripts/golden/torch_reference.py CKPT_DIR \\
        --cases scripts/golden/bench-cases.json --out OUT.json

CKPT_DIR holds `base/` (a Qwen3.5 base in the released layout, or an attention-only Qwen3 / Qwen2.5 base) and `kev/`
(LoRA adapter, head.pt, tokenizer), as make_kev4b.py or make_kev_qwen3.py writes them. The model is loaded the way Kev serves it on CUDA with its eager path (KEV_FUSED=0,
KEV_CUDA_GRAPHS=0): AutoModelForCausalLM(...).model, the text model only, SDPA attention; the LoRA is merged in fp32
(fp32(W) + (B @ A)·s, TF32 off) and the merged model is cast once to bf16 (A_log too, as Kev's bf16 load does; the
rotary frequency buffers stay fp32, as from_pretrained(dtype=bf16) leaves them). Each request runs as Kev serves a
hybrid backbone: the state once into the model's cache, then the question rows (right-padded, one batch) continuing
from a replicated copy of that cache; the pointer head runs in fp32. The cached form is checked against full rows
(state + branch as one causal sequence) in fp32 first, and falls back to simpler forms when it does not hold. An
attention-only base runs Kev's packed block-causal form instead (kev/model.py probs_and_prefix / probs_with_prefix):
a new state is one pass over the state and every branch under the block-causal mask, into a cache cropped back to
the state; a cached state runs the branches alone under the mask's branch rows, and the cache is cropped back.

Latency is model time: from a synchronised GPU to the probabilities on the host, tokenization excluded. "new state"
requests prefix the state with "Ticket <i>. " (i = 1, 2, ...) so every request misses the cache, as Kev's
serving_bench does; "cached" requests run the question rows from the cached state of the case's own text (i = 0).
Median of 20 after 3 warm-ups (fewer when the time budget says so; the output says how many). FORMAT.md, section
"kev-4b", describes the output file.

On the host CPU (scripts/cpu/bench.sh):

    python3 scripts/golden/torch_reference.py CKPT_DIR --device cpu --dtype fp32|bf16 --threads N \\
        --cases scripts/golden/bench-cases.json --out OUT.json

times one dtype (fp32: the merged model in fp32; bf16: cast once to bf16, oneDNN/AMX) with N intra- and inter-op
threads, median of 5 after 1 warm-up; FORMAT.md, "torch_reference.py --device cpu", describes its output.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import copy  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kevref  # noqa: E402
import make_fixtures as mf  # noqa: E402
import refargs  # noqa: E402
from make_fixtures import expect, log, note  # noqa: E402

import peft  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

DEV = "cuda"
ROW_PASS_TOKENS = 16384  # Kev: one pass holds at most this many tokens, counting the cached state once per row
MODES = ("batched", "batched-nomask", "per-row")  # cached forms, tried in this order; "full" is the last resort
ATTN_MODES = ("packed", "batched", "per-row")  # attention-only bases: Kev's packed form first
MODE_TEXT = {
    "packed": "Kev's packed block-causal pass: the state and every branch in one sequence under the block-causal mask "
              "(a branch sees the state and itself), the cache cropped back to the state; a cached state runs the "
              "branches alone under the mask's branch rows",
    "batched": "state pass into the cache, then all question rows in one right-padded batch continuing from a "
               "replicated copy of the cache, 2-D attention mask (Kev's eager serving path)",
    "batched-nomask": "as batched, without the attention mask (pads sit after every real token)",
    "per-row": "state pass into the cache, then each question row alone continuing from a deep copy of the cache",
    "full": "each question row as one causal sequence state + branch, no cache",
}
CACHED_TOL = 1e-3  # fp32: cached form vs full rows, max |dp|; Kev's tests hold its forms to 1e-4, a broken cache is far off


def sync():
    """Waits for the device (CUDA); nothing to wait for on the CPU."""
    if DEV == "cuda":
        torch.cuda.synchronize()


def empty_cache():
    """Returns cached device memory to the driver (CUDA only)."""
    if DEV == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------
# Requests

def encode(request, tokenize, ids):
    state_text, questions, meta = kevref.to_record(request)
    state_ids, rows = kevref.encode(state_text, questions, tokenize, ids)
    return {"state_text": state_text, "questions": questions, "meta": meta, "state_ids": state_ids, "rows": rows}


def ticket(state, i):
    """Kev's serving_bench: i = 0 is the case's own state; i > 0 a new state of almost the same length."""
    return state if i == 0 else f"Ticket {i}. {state}"


def rows_per_pass(rows, n_state):
    return max(1, ROW_PASS_TOKENS // (n_state + max(len(r) for r in rows)))


# ---------------------------------------------------------------------------------------------------------------
# Model

def load_text_model(base_dir):
    """fp32 text model on DEV, loaded as Kev loads the base; every text tensor checked against the files."""
    t0 = time.time()
    kw = {"dtype": torch.float32, "attn_implementation": "sdpa", "local_files_only": True}
    if DEV == "cpu":
        lm = AutoModelForCausalLM.from_pretrained(str(base_dir), **kw)
    else:
        try:
            lm = AutoModelForCausalLM.from_pretrained(str(base_dir), device_map=DEV, **kw)
        except Exception as e:  # noqa: BLE001 - a loader without device_map support: load on the host, then move
            note(f"from_pretrained(device_map={DEV!r}) failed ({type(e).__name__}: {e}); loading on the host")
            lm = AutoModelForCausalLM.from_pretrained(str(base_dir), **kw).to(DEV)
    tm = lm.model.eval()
    how = f"AutoModelForCausalLM -> {type(lm).__name__}.model ({type(tm).__name__}), fp32, sdpa"
    expect(type(tm).__name__ in ("Qwen3_5TextModel", "Qwen3Model", "Qwen2Model"), f"text model is {type(tm).__name__}")
    params = dict(tm.named_parameters())
    _, idx = mf.read_index(base_dir)
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in idx["weight_map"]) else "model."
    seen = 0
    for shard in sorted(set(idx["weight_map"].values())):
        with safe_open(str(base_dir / shard), framework="pt", device=DEV) as f:
            for key in f.keys():
                if not key.startswith(prefix):
                    continue
                name = key[len(prefix):]
                expect(name in params, f"{key} is not a parameter of the loaded text model")
                p = params[name]
                expect(p.dtype == torch.float32 and p.device.type == torch.device(DEV).type,
                       f"{name} loaded as {p.dtype} on {p.device}")
                expect(torch.equal(p.detach(), f.get_tensor(key).float()), f"{name} differs from the file")
                seen += 1
    expect(seen == len(params), f"{seen} text tensors in the files, the model has {len(params)}")
    sync()
    log(f"base loaded as {how} in {time.time() - t0:.1f}s; all {seen} text tensors equal the files")
    return tm, how


def merge_lora(tm, kev_dir):
    """W <- fp32(W) + (B @ A)·s in place on the fp32 model (TF32 off); a few modules checked in float64."""
    acfg = json.loads((kev_dir / "adapter_config.json").read_text())
    expect(acfg.get("peft_type") == "LORA", f"peft_type {acfg.get('peft_type')}")
    expect(not acfg.get("trainable_token_indices"), "adapters with trainable_token_indices stay unmerged in Kev")
    lora = {"r": acfg["r"], "alpha": acfg["lora_alpha"], "rslora": bool(acfg.get("use_rslora"))}
    scale = mf.lora_scale(lora)
    params = dict(tm.named_parameters())
    merged, worst, kinds_checked = [], 0.0, set()
    with safe_open(str(kev_dir / "adapter_model.safetensors"), framework="pt", device=DEV) as f:
        keys = set(f.keys())
        for key in sorted(keys):
            m = mf.ADAPTER_KEY.match(key)
            expect(m is not None, f"adapter key {key}")
            if m.group(2) != "A":
                continue
            module = m.group(1)
            b_key = f"base_model.model.{module}.lora_B.weight"
            expect(b_key in keys, f"{b_key} missing")
            a, b = f.get_tensor(key).float(), f.get_tensor(b_key).float()
            w = params.get(module + ".weight")
            expect(w is not None and w.dtype == torch.float32, f"{module}: no fp32 weight to merge into")
            kind = module.rpartition(".")[2]
            check = kind not in kinds_checked  # one module of each kind (12 on Qwen3.5, 7 on attention-only bases)
            w0 = w.detach().clone() if check else None
            w.data.add_((b @ a) * scale)
            if check:
                want = w0.double() + (b.double() @ a.double()) * scale
                err = ((w.detach().double() - want).abs().max() / want.abs().max()).item()
                worst = max(worst, err)
                kinds_checked.add(kind)
            merged.append(module)
    sync()
    expect(worst < 1e-6, f"fp32 merge differs from float64 by {worst:.3g} (relative)")
    log(f"LoRA merged in fp32: {len(merged)} modules, r {lora['r']}, alpha {lora['alpha']}, scale {scale}; "
        f"{len(kinds_checked)} kinds checked in float64 (max relative error {worst:.2g})")
    return {"modules": len(merged), "r": lora["r"], "alpha": lora["alpha"], "use_rslora": lora["rslora"],
            "scale": scale, "float64_check_max_rel_err": worst}


def load_head(kev_dir, d):
    meta = torch.load(str(kev_dir / "head.pt"), map_location="cpu", weights_only=True)
    dp = int(meta.get("head_dim", 256))
    head = mf.PointerHead(d, dp)
    head.load_state_dict(meta["head"])
    head.to(DEV).eval()
    info = {k: meta.get(k) for k in ("base", "base_revision", "lora", "head_dim", "temperature", "weights")}
    return head, dp, float(meta.get("temperature", 1.0)), info


def set_sdpa_fp32_exact(exact):
    """fp32 reference: math SDPA only (Kev's serving_bench turns the fused kernels off for it); bf16: all allowed."""
    torch.backends.cuda.enable_flash_sdp(not exact)
    torch.backends.cuda.enable_mem_efficient_sdp(not exact)
    torch.backends.cuda.enable_math_sdp(True)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(not exact)


# ---------------------------------------------------------------------------------------------------------------
# Serving forms

def state_pass(tm, state_ids):
    ids = torch.tensor([state_ids], device=DEV)
    pos = torch.arange(len(state_ids), device=DEV)[None]
    out = tm(input_ids=ids, position_ids=pos, use_cache=True)
    expect(out.past_key_values is not None, "the model returned no cache")
    return out.past_key_values


def replicate(cache, n, deep):
    """n copies of a batch-1 cache, leaving the original as it was: the cache and its layers are copied with their
    containers (Kev's replica), or the whole cache deep-copied; reorder_cache then gathers row 0 n times."""
    if deep:
        rep = copy.deepcopy(cache)
        if n == 1:
            return rep
    else:
        rep = copy.copy(cache)
        holders = [rep]
        if hasattr(cache, "layers"):  # per-layer caches; older model-specific caches keep lists on the cache itself
            rep.layers = [copy.copy(layer) for layer in cache.layers]
            holders += rep.layers
        for obj in holders:
            for k, v in list(vars(obj).items()):
                if k != "layers" and isinstance(v, (dict, list)):
                    setattr(obj, k, copy.copy(v))
    rep.reorder_cache(torch.zeros(n, dtype=torch.long, device=DEV))
    return rep


def cache_tensors(cache):
    found = []

    def walk(v):
        if torch.is_tensor(v):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    layers = getattr(cache, "layers", None)
    if layers is None:
        walk(list(vars(cache).values()))
    else:
        for layer in layers:
            walk(list(vars(layer).values()))
    return found


def rows_hidden(tm, cache, n_state, rows, mode, pad_id):
    """Hidden states (fp32, branch positions only) of question rows continuing a cached state."""
    per = 1 if mode == "per-row" else rows_per_pass(rows, n_state)
    out = []
    for s in range(0, len(rows), per):
        part = rows[s:s + per]
        b, n = len(part), max(len(r) for r in part)
        ids = torch.full((b, n), pad_id, dtype=torch.long)
        pos = torch.zeros((b, n), dtype=torch.long)
        att = torch.zeros((b, n), dtype=torch.long)
        for i, r in enumerate(part):
            ids[i, :len(r)] = torch.tensor(r)
            pos[i, :len(r)] = torch.arange(n_state, n_state + len(r))
            att[i, :len(r)] = 1
        ids, pos, att = ids.to(DEV), pos.to(DEV), att.to(DEV)
        kw = {}
        if mode == "batched":
            kw["attention_mask"] = torch.cat([torch.ones((b, n_state), dtype=torch.long, device=DEV), att], 1)
        rep = replicate(cache, b, deep=(mode == "per-row"))
        h = tm(input_ids=ids, position_ids=pos, past_key_values=rep, use_cache=True, **kw).last_hidden_state.float()
        out += [h[i, :len(r)] for i, r in enumerate(part)]
    return out


def block_mask(seg, dtype):
    """Kev's block-causal additive mask [1, 1, L, L] (kev/model.py branch_mask_batch for one record): attend(i, j)
    iff j <= i and (seg[j] == 0 or seg[j] == seg[i]), the diagonal always; finfo(dtype).min elsewhere."""
    s = torch.tensor(seg, device=DEV)
    n = len(seg)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=DEV))
    allow = (causal & ((s[None, :] == s[:, None]) | (s[None, :] == 0))) | torch.eye(n, dtype=torch.bool, device=DEV)
    return torch.zeros(1, 1, n, n, dtype=dtype, device=DEV).masked_fill(~allow, torch.finfo(dtype).min)


def packed_hidden(tm, enc, cache):
    """Kev's packed block-causal pass. cache None: the state and every branch in one sequence into a new cache, which
    is then cropped back to the state (probs_and_prefix); else the branches alone continuing cache under the mask's
    branch rows, the cache cropped back afterwards (probs_with_prefix). -> (per-row branch hidden states, cache)."""
    from transformers import DynamicCache
    state_ids, rows = enc["state_ids"], [r["ids"] for r in enc["rows"]]
    ls = len(state_ids)
    seg, pos, offs = [0] * ls, list(range(ls)), []
    for k, r in enumerate(rows, start=1):
        offs.append(len(seg) - ls)
        seg += [k] * len(r)
        pos += list(range(ls, ls + len(r)))
    branch = [i for r in rows for i in r]
    dt = next(tm.parameters()).dtype
    mask = block_mask(seg, dt)
    if cache is None:
        ids = torch.tensor([state_ids + branch], device=DEV)
        out = tm(input_ids=ids, position_ids=torch.tensor([pos], device=DEV), attention_mask=mask,
                 past_key_values=DynamicCache(config=tm.config), use_cache=True)
        h = out.last_hidden_state[0, ls:].float()
        cache = out.past_key_values
        cache.crop(-len(branch))
    else:
        try:
            out = tm(input_ids=torch.tensor([branch], device=DEV), position_ids=torch.tensor([pos[ls:]], device=DEV),
                     attention_mask=mask[:, :, ls:, :], past_key_values=cache, use_cache=True)
            h = out.last_hidden_state[0].float()
        finally:
            cache.crop(-len(branch))
    return [h[o:o + len(r)] for o, r in zip(offs, rows)], cache


def full_rows_hidden(tm, state_ids, rows):
    out = []
    for r in rows:
        h = tm(input_ids=torch.tensor([state_ids + r], device=DEV), use_cache=False).last_hidden_state[0].float()
        out.append(h[len(state_ids):])
    return out


class Server:
    """One model + head, answering encoded requests in one serving form."""

    def __init__(self, tm, head, dp, temperature, pad_id):
        self.tm, self.head, self.dp, self.temperature, self.pad_id = tm, head, dp, temperature, pad_id
        self.hybrid = "linear_attention" in set(getattr(tm.config, "layer_types", None) or [])
        self.mode = "batched" if self.hybrid else "packed"

    def readout(self, hs, enc):
        """Pointer head (fp32) per question; one device-to-host copy for the request."""
        n0 = len(enc["state_ids"])
        ps = []
        for h, r in zip(hs, enc["rows"]):
            p, _ = mf.pointer(self.head, h, r["decide"] - n0, [o - n0 for o in r["opts"]], self.temperature, self.dp)
            ps.append(p)
        flat = torch.cat(ps).cpu()
        return [x.tolist() for x in flat.split([len(r["opts"]) for r in enc["rows"]])]

    def full(self, enc):
        return self.readout(full_rows_hidden(self.tm, enc["state_ids"], [r["ids"] for r in enc["rows"]]), enc)

    def cached(self, enc, cache):
        if self.mode == "full":
            return self.full(enc)
        if self.mode == "packed":
            return self.readout(packed_hidden(self.tm, enc, cache)[0], enc)
        hs = rows_hidden(self.tm, cache, len(enc["state_ids"]), [r["ids"] for r in enc["rows"]], self.mode,
                         self.pad_id)
        return self.readout(hs, enc)

    def new(self, enc):
        """-> (probabilities, the state's cache or None in the full-row form)."""
        if self.mode == "full":
            return self.full(enc), None
        if self.mode == "packed":
            hs, cache = packed_hidden(self.tm, enc, None)
            return self.readout(hs, enc), cache
        cache = state_pass(self.tm, enc["state_ids"])
        return self.cached(enc, cache), cache


def max_dp(a, b):
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


def choose_mode(server, encs):
    """fp32: the first cached form that runs, leaves the cached state unchanged, repeats itself and matches full
    rows on every case. -> (mode, {case: cached probabilities}, {case: full-row probabilities}, {case: max |dp|})."""
    full = {name: server.full(enc) for name, enc in encs.items()}
    for mode in (MODES if server.hybrid else ATTN_MODES):
        server.mode = mode
        try:
            got, dps = {}, {}
            for name, enc in encs.items():
                cache = state_pass(server.tm, enc["state_ids"])
                before = [t.clone() for t in cache_tensors(cache)]
                p = server.cached(enc, cache)
                p2 = server.cached(enc, cache)
                after = cache_tensors(cache)
                if len(before) != len(after) or not all(
                        a.shape == b.shape and torch.equal(a, b) for a, b in zip(before, after)):
                    raise RuntimeError("the question rows changed the cached state")
                if max_dp(p, p2) > 1e-6:
                    raise RuntimeError(f"a second run on the same cache differs by {max_dp(p, p2):.3g}")
                got[name], dps[name] = p, max_dp(p, full[name])
            worst = max(dps.values())
            if worst <= CACHED_TOL:
                log(f"fp32: serving form {mode!r} matches full rows (max |dp| {worst:.3g}) and keeps the cache intact")
                return mode, got, full, dps
            note(f"serving form {mode!r}: max |dp| against full rows {worst:.3g} > {CACHED_TOL}; trying the next")
        except Exception as e:  # noqa: BLE001 - reported, then the next form is tried
            note(f"serving form {mode!r} failed: {type(e).__name__}: {e}")
        empty_cache()
    note("no cached form held: every request runs as full rows (cached latency = full rows again)")
    server.mode = "full"
    return "full", dict(full), full, {name: 0.0 for name in encs}


# ---------------------------------------------------------------------------------------------------------------
# Timing

def timed(fn):
    sync()
    t0 = time.perf_counter()
    r = fn()
    sync()
    return (time.perf_counter() - t0) * 1e3, r


def summary(ms):
    s = sorted(ms)
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return {"median": round(statistics.median(s), 3), "p10": round(q[0], 3), "p90": round(q[8], 3),
            "min": round(s[0], 3), "max": round(s[-1], 3), "runs": len(s), "all": [round(x, 3) for x in ms]}


# ---------------------------------------------------------------------------------------------------------------

def to_bf16(tm):
    """Casts the merged fp32 model to bf16 in place, as Kev serves it: one rounding of every parameter (A_log too, as
    Kev's bf16 load does); floating buffers (rotary frequencies) stay fp32, as from_pretrained(dtype=bf16) leaves them.
    -> (the fp32 A_log parameters by name, a description of the bf16 model)."""
    a_log32 = {n: p.detach().clone() for n, p in tm.named_parameters() if n.endswith("A_log")}
    buffers32 = {n: b.detach().clone() for n, b in tm.named_buffers() if b.is_floating_point()}
    tm.to(torch.bfloat16)
    for n, b in buffers32.items():
        mod_name, _, attr = n.rpartition(".")
        setattr(tm.get_submodule(mod_name) if mod_name else tm, attr, b)
    dtypes = {str(p.dtype) for n, p in tm.named_parameters()}
    expect(dtypes == {"torch.bfloat16"}, f"bf16 model parameter dtypes {dtypes}")
    bf16_model = {"parameters": "bfloat16 (merged fp32 weights rounded once; A_log rounded too, as Kev's bf16 load does)",
                  "float_buffers": {n: str(b.dtype) for n, b in tm.named_buffers() if b.is_floating_point()}}
    return a_log32, bf16_model


def load_requests(ckpt, cases_path, n_new, names=None):
    """The checkpoint's tokenizer and the encoded requests of the cases file: each case's own state (i = 0) and n_new
    new states (i = 1..n_new); names: the cases to encode (default all, in the file's order)."""
    base_dir, kev_dir = ckpt / "base", ckpt / "kev"
    tok_path = base_dir / "tokenizer.json"  # Kev takes the tokenizer from the base; the adapter's copy must agree
    expect(tok_path.read_bytes() == (kev_dir / "tokenizer.json").read_bytes(), "base and kev tokenizer.json differ")
    tk = Tokenizer.from_file(str(tok_path))
    ids = kevref.delimiter_ids(tk.token_to_id)
    tcfg = json.loads((base_dir / "tokenizer_config.json").read_text())
    pad_id = tk.token_to_id(tcfg.get("pad_token") or "<|endoftext|>")
    expect(pad_id is not None, "no pad token")

    def tokenize(text):
        return tk.encode(text, add_special_tokens=False).ids

    bench = json.loads(cases_path.read_text())
    if names is None:
        names = list(bench["cases"])
    encs, news = {}, {}
    for name in names:
        c = bench["cases"][name]
        encs[name] = encode({"state": ticket(c["state"], 0), "questions": c["questions"]}, tokenize, ids)
        news[name] = [encode({"state": ticket(c["state"], i), "questions": c["questions"]}, tokenize, ids)
                      for i in range(1, n_new + 1)]
        e = encs[name]
        log(f"{name}: state {len(e['state_ids'])} tokens, {len(e['rows'])} rows of "
            f"{[len(r['ids']) for r in e['rows']]} tokens")
    try:
        at = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
        texts = [t for e in encs.values() for t in [e["state_text"]] + [q["instr"] for q in e["questions"]]
                 + [o for q in e["questions"] for o in q["options"]]]
        bad = [t for t in texts if at(kevref.escape(t), add_special_tokens=False)["input_ids"]
               != tokenize(kevref.escape(t))]
        if bad:
            note(f"AutoTokenizer ({type(at).__name__}) differs from tokenizer.json on {len(bad)} of {len(texts)} "
                 f"texts, e.g. {bad[0][:60]!r}; the encodings follow tokenizer.json")
        else:
            log(f"AutoTokenizer ({type(at).__name__}) agrees with tokenizer.json on all {len(texts)} texts")
    except Exception as e:  # noqa: BLE001 - informational
        note(f"AutoTokenizer could not be checked: {type(e).__name__}: {e}")
    return bench, names, encs, news, ids, pad_id


def main():
    args = refargs.parse(description=__doc__)
    if args.device == "cpu":
        return main_cpu(args)
    t_start = time.time()
    deadline = t_start + args.budget_s
    torch.set_grad_enabled(False)
    expect(torch.cuda.is_available(), "a CUDA GPU is needed")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    gpu = torch.cuda.get_device_name(0)
    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(), "transformers": transformers.__version__,
                "peft": peft.__version__, "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                "flash_linear_attention": importlib.util.find_spec("fla") is not None,
                "causal_conv1d": importlib.util.find_spec("causal_conv1d") is not None}
    log(f"{gpu}; " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    base_dir, kev_dir = args.ckpt / "base", args.ckpt / "kev"
    bench, names, encs, news, ids, pad_id = load_requests(args.ckpt, args.cases, args.warmup + args.reps)

    # ---- fp32: load, merge, pick the serving form, probabilities
    tm, loaded_as = load_text_model(base_dir)
    merge = merge_lora(tm, kev_dir)
    head, dp, temperature, head_info = load_head(kev_dir, tm.config.hidden_size)
    server = Server(tm, head, dp, temperature, pad_id)
    set_sdpa_fp32_exact(True)
    t0 = time.time()
    mode, p32, p32_full, dp_cached_full32 = choose_mode(server, encs)
    torch.cuda.synchronize()
    log(f"fp32 probabilities for {len(names)} cases in {time.time() - t0:.1f}s (form {mode!r})")

    # ---- bf16 as served: one rounding of the merged weights; floating buffers (rotary frequencies) stay fp32
    a_log32, bf16_model = to_bf16(tm)
    set_sdpa_fp32_exact(False)
    torch.cuda.reset_peak_memory_stats()

    results = {}
    for name in names:
        enc = encs[name]
        p16, _ = server.new(enc)
        p16_full = server.full(enc) if mode != "full" else p16
        results[name] = {"p16": p16, "p16_full": p16_full}
        log(f"{name}: bf16 max |dp| vs fp32 {max_dp(p16, p32[name]):.4f}; bf16 cached vs full rows "
            f"{max_dp(p16, p16_full):.4f}")

    # ---- timing (bf16)
    reserve = 45.0  # the A_log fp32 variant, writing, slack
    for ci, name in enumerate(names):
        enc, r = encs[name], results[name]
        ms_new, ms_cached = [], []
        example = None
        for i in range(args.warmup):
            ms, (p, _) = timed(lambda: server.new(news[name][i]))
            if i == 0:
                example = p
            ms_new.append(ms)
        _, cache0 = server.new(enc)
        for _ in range(args.warmup):
            ms, _ = timed(lambda: server.cached(enc, cache0))
            ms_cached.append(ms)
        t_new, t_cached = ms_new[-1] / 1e3, ms_cached[-1] / 1e3
        share = (deadline - reserve - time.time()) / (len(names) - ci)
        reps = max(3, min(args.reps, int(share / max(t_new + t_cached, 1e-3))))
        if reps < args.reps:
            note(f"{name}: {reps} timed runs of each kind, not {args.reps} (time budget; one run ~{t_new * 1e3:.0f} ms "
                 f"new, {t_cached * 1e3:.0f} ms cached)")
        ms_new, ms_cached = [], []
        for i in range(args.warmup, args.warmup + reps):
            ms, _ = timed(lambda: server.new(news[name][i]))
            ms_new.append(ms)
        last_cached = None
        for _ in range(reps):
            ms, last_cached = timed(lambda: server.cached(enc, cache0))
            ms_cached.append(ms)
        del cache0
        torch.cuda.empty_cache()
        r.update({"new": summary(ms_new), "cached": summary(ms_cached), "example_ticket1": example,
                  "cached_vs_fresh": max_dp(last_cached, r["p16"])})
        log(f"{name}: new state {r['new']['median']:.1f} ms (p10 {r['new']['p10']:.1f}, p90 {r['new']['p90']:.1f}), "
            f"cached {r['cached']['median']:.1f} ms, {reps} runs each")
    peak_gb = torch.cuda.max_memory_allocated() / 1e9

    # ---- bf16 with A_log kept fp32 (a reimplementation may keep it in fp32)
    layers_with = {n.rpartition(".")[0] for n in a_log32}
    for mod_name in layers_with:
        tm.get_submodule(mod_name).A_log = torch.nn.Parameter(a_log32[mod_name + ".A_log"], requires_grad=False)
    for name in names:
        results[name]["p16_alog32"], _ = server.new(encs[name])

    # ---- output
    cases = []
    for name in names:
        c, enc, r = bench["cases"][name], encs[name], results[name]
        rows = [{"qid": m["id"], "ids": row["ids"], "decide": row["decide"], "opts": row["opts"]}
                for m, row in zip(enc["meta"], enc["rows"])]
        ex = news[name][0]
        cases.append({
            "name": name,
            "state_text": enc["state_text"],
            "questions": c["questions"],
            "state_ids": enc["state_ids"],
            "rows": rows,
            "state_tokens": len(enc["state_ids"]),
            "row_tokens": [len(row["ids"]) for row in enc["rows"]],
            "input_tokens": len(enc["state_ids"]) + sum(len(row["ids"]) for row in enc["rows"]),
            "probabilities_bf16": r["p16"],
            "probabilities_fp32": p32[name],
            "probabilities_bf16_alog_fp32": r["p16_alog32"],
            "max_abs_dp_bf16_vs_fp32": max_dp(r["p16"], p32[name]),
            "answers_bf16": kevref.answers_body_json(kevref.to_answers(enc["meta"], r["p16"])),
            "checks": {
                "fp32_cached_vs_full_rows_max_abs_dp": dp_cached_full32[name],
                "fp32_full_rows": p32_full[name],
                "bf16_cached_vs_full_rows_max_abs_dp": max_dp(r["p16"], r["p16_full"]),
                "bf16_cached_again_vs_fresh_max_abs_dp": r["cached_vs_fresh"],
                "bf16_alog_fp32_vs_bf16_max_abs_dp": max_dp(r["p16_alog32"], r["p16"]),
            },
            "new_state_example": {"state_text": ex["state_text"], "state_tokens": len(ex["state_ids"]),
                                  "probabilities_bf16": r["example_ticket1"]},
            "latency_new_ms": r["new"],
            "latency_cached_ms": r["cached"],
        })
    doc = {
        "checkpoint": str(args.ckpt),
        "gpu": gpu,
        "versions": versions,
        "model": {"loaded_as": loaded_as, "attention": "sdpa (bf16: PyTorch's choice of kernel; fp32: math only)",
                  "delta_rule": "transformers' torch fallback (chunked, fp32 inside)"
                  if not versions["flash_linear_attention"] else "flash-linear-attention",
                  "tf32": False, "merge": merge, "bf16": bf16_model, "serving_form": mode,
                  "serving_form_text": MODE_TEXT[mode], "rows_per_pass_budget": ROW_PASS_TOKENS,
                  "peak_gpu_memory_gb_bf16": round(peak_gb, 2)},
        "head": head_info,
        "delimiters": ids,
        "pad_id": pad_id,
        "timing": {"what": "model time: synchronised GPU to probabilities on the host; tokenization excluded",
                   "new": "state pass + question rows + head; state 'Ticket <i>. ' + the case's state, i = 1, 2, ...",
                   "cached": "question rows + head from the cached state of the case's own text (i = 0)",
                   "warmup": args.warmup, "reps_asked": args.reps},
        "notes": list(mf.NOTES),
        "seconds": round(time.time() - t_start, 1),
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")

    print("\n" + "=" * 118)
    print(f"{gpu}; torch {torch.__version__}, transformers {transformers.__version__}; serving form {mode!r}; "
          f"bf16 peak {peak_gb:.1f} GB; {time.time() - t_start:.0f}s in all")
    print(f"{'case':32s} {'state':>6s} {'rows':>4s} {'input':>6s} {'new ms':>8s} {'p10-p90':>15s} {'cached ms':>10s} "
          f"{'runs':>5s} {'|dp| bf16/fp32':>15s} {'cache/full32':>13s}")
    for c in cases:
        n, k = c["latency_new_ms"], c["latency_cached_ms"]
        print(f"{c['name']:32s} {c['state_tokens']:6d} {len(c['rows']):4d} {c['input_tokens']:6d} {n['median']:8.1f} "
              f"{n['p10']:7.1f}-{n['p90']:<7.1f} {k['median']:10.1f} {n['runs']:5d} {c['max_abs_dp_bf16_vs_fp32']:15.4f} "
              f"{c['checks']['fp32_cached_vs_full_rows_max_abs_dp']:13.2g}")
    if mf.NOTES:
        print("\nNOTES")
        for n in mf.NOTES:
            print(f"  - {n}")


# ---------------------------------------------------------------------------------------------------------------
# The host CPU

def cpu_name():
    """The processor's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def peak_rss_bytes():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_json(path, doc):
    """Writes doc to path through a temporary file, so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main_cpu(args):
    """One dtype on the host CPU. The merged fp32 model picks and checks the serving form (on the cases whose state
    has at most --check-max-tokens tokens: full rows of a long state cost one request per question), then is cast to
    bf16 for --dtype bf16. Per case: the case's own state first (untimed: its probabilities, and the cache the cached
    runs continue), warmup - 1 more new states and warmup cached runs untimed, then reps new states (tickets) and reps
    cached runs, fewer when the budget says so. The output file is rewritten after every case ("complete": false
    until the last), so a run cut short leaves the cases it finished."""
    global DEV
    DEV = "cpu"
    t_start = time.time()
    deadline = t_start + args.budget_s
    if args.threads:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(args.threads)
        except RuntimeError as e:  # only before the first inter-op work; reported, never silent
            note(f"set_num_interop_threads({args.threads}) failed: {e}")
    torch.set_grad_enabled(False)
    torch.set_float32_matmul_precision("highest")  # fp32 stays fp32 (no bf16 passes inside fp32 matmuls)
    cpu = cpu_name()
    versions = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                "peft": peft.__version__, "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                "mkldnn": torch.backends.mkldnn.is_available(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "flash_linear_attention": importlib.util.find_spec("fla") is not None,
                "causal_conv1d": importlib.util.find_spec("causal_conv1d") is not None}
    threads = {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
               "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
               "asked": args.threads}
    log(f"{cpu}; threads {threads}; " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    base_dir, kev_dir = args.ckpt / "base", args.ckpt / "kev"
    all_names = list(json.loads(args.cases.read_text())["cases"])
    try:
        names = refargs.select_cases(all_names, args.case)
    except refargs.ArgError as e:
        mf.fail(str(e))
    n_tickets = max(args.warmup - 1, 0) + args.reps
    bench, names, encs, news, ids, pad_id = load_requests(args.ckpt, args.cases, n_tickets, names)

    tm, loaded_as = load_text_model(base_dir)
    merge = merge_lora(tm, kev_dir)
    head, dp, temperature, head_info = load_head(kev_dir, tm.config.hidden_size)
    server = Server(tm, head, dp, temperature, pad_id)
    t0 = time.time()
    checked = {n: e for n, e in encs.items() if len(e["state_ids"]) <= args.check_max_tokens}
    p32, dp_cached_full32 = {}, {}
    if checked:
        mode, p32, _, dp_cached_full32 = choose_mode(server, checked)
        log(f"fp32: serving form {mode!r} chosen on {len(checked)} of {len(encs)} cases in {time.time() - t0:.1f}s")
    else:
        mode = server.mode
        note(f"no case has a state of at most {args.check_max_tokens} tokens: serving form {mode!r} not checked "
             "against full rows")
    unchecked = [n for n in names if n not in checked]
    if unchecked and checked:
        note(f"serving form checked against full rows on {len(checked)} cases, not on {unchecked} (state longer than "
             f"{args.check_max_tokens} tokens)")
    bf16_model = None
    if args.dtype == "bf16":
        _, bf16_model = to_bf16(tm)
    key = "probabilities_" + args.dtype

    doc = {
        "checkpoint": str(args.ckpt),
        "device": "cpu",
        "dtype": args.dtype,
        "cpu": cpu,
        "threads": threads,
        "versions": versions,
        "model": {"loaded_as": loaded_as, "attention": "sdpa (PyTorch's CPU choice of kernel)",
                  "delta_rule": "transformers' torch fallback (chunked, fp32 inside)"
                  if not versions["flash_linear_attention"] else "flash-linear-attention",
                  "matmul": "fp32, float32_matmul_precision highest" if args.dtype == "fp32" else
                  "bf16 weights and activations (oneDNN; AMX where the processor has it)",
                  "merge": merge, "bf16": bf16_model, "serving_form": mode, "serving_form_text": MODE_TEXT[mode],
                  "serving_form_checked_on": list(checked), "rows_per_pass_budget": ROW_PASS_TOKENS},
        "head": head_info,
        "delimiters": ids,
        "pad_id": pad_id,
        "timing": {"what": "model time: wall clock around the request on the host (no device to wait for); "
                           "tokenization excluded",
                   "new": "state pass + question rows + head; state 'Ticket <i>. ' + the case's state, i = 1, 2, ...",
                   "cached": "question rows + head from the cached state of the case's own text (i = 0)",
                   "warmup": args.warmup, "reps_asked": args.reps, "budget_s": args.budget_s},
        "complete": False,
        "notes": mf.NOTES,
        "seconds": None,
        "peak_rss_bytes": None,
        "cases": [],
    }
    reserve = 5.0  # writing, slack

    def save():
        doc["seconds"], doc["peak_rss_bytes"] = round(time.time() - t_start, 1), peak_rss_bytes()
        write_json(args.out, doc)

    for ci, name in enumerate(names):
        enc = encs[name]
        ms_first, (p0, cache0) = timed(lambda: server.new(enc))
        # The case as far as it goes: its probabilities and first request, saved before the timed runs.
        row = {
            "name": name,
            "state_text": enc["state_text"],
            "state_ids": enc["state_ids"],
            "rows": [{"qid": m["id"], "ids": r["ids"], "decide": r["decide"], "opts": r["opts"]}
                     for m, r in zip(enc["meta"], enc["rows"])],
            "state_tokens": len(enc["state_ids"]),
            "row_tokens": [len(r["ids"]) for r in enc["rows"]],
            "input_tokens": len(enc["state_ids"]) + sum(len(r["ids"]) for r in enc["rows"]),
            "probabilities": p0,
            key: p0,
            "answers": kevref.answers_body_json(kevref.to_answers(enc["meta"], p0)),
            "checks": {"fp32_cached_vs_full_rows_max_abs_dp": dp_cached_full32.get(name),
                       "cached_again_vs_fresh_max_abs_dp": None},
            "new_state_example": None,
            "latency_first_ms": round(ms_first, 3),
            "latency_new_ms": None,
            "latency_cached_ms": None,
        }
        if args.dtype == "bf16" and name in p32:
            row["probabilities_fp32"] = p32[name]
            row["max_abs_dp_bf16_vs_fp32"] = max_dp(p0, p32[name])
        doc["cases"].append(row)
        save()

        tickets = list(news[name])
        example, ms_new, ms_cached = None, [ms_first], []
        for _ in range(max(args.warmup - 1, 0)):
            t = tickets.pop(0)
            ms, (p, _) = timed(lambda: server.new(t))
            if example is None:
                example = (t, p)
            ms_new.append(ms)
        for _ in range(args.warmup):
            ms, _ = timed(lambda: server.cached(enc, cache0))
            ms_cached.append(ms)
        t_new = ms_new[-1] / 1e3
        t_cached = ms_cached[-1] / 1e3 if ms_cached else t_new / 4
        share = (deadline - reserve - time.time()) / (len(names) - ci)
        reps = max(1, min(args.reps, int(share / max(t_new + t_cached, 1e-3))))
        if reps < args.reps:
            note(f"{name}: {reps} timed runs of each kind, not {args.reps} (time budget; one run ~{t_new * 1e3:.0f} ms "
                 f"new, {t_cached * 1e3:.0f} ms cached)")
        ms_new, ms_cached = [], []
        for t in tickets[:reps]:
            ms, (p, _) = timed(lambda: server.new(t))
            if example is None:
                example = (t, p)
            ms_new.append(ms)
        last_cached = None
        for _ in range(reps):
            ms, last_cached = timed(lambda: server.cached(enc, cache0))
            ms_cached.append(ms)
        del cache0
        new, cached = summary(ms_new), summary(ms_cached)
        row["checks"]["cached_again_vs_fresh_max_abs_dp"] = max_dp(last_cached, p0)
        row["new_state_example"] = {"state_text": example[0]["state_text"], "state_tokens": len(example[0]["state_ids"]),
                                    key: example[1], "probabilities": example[1]}
        row["latency_new_ms"], row["latency_cached_ms"] = new, cached
        save()
        log(f"{name}: new state {new['median']:.1f} ms (p10 {new['p10']:.1f}, p90 {new['p90']:.1f}), cached "
            f"{cached['median']:.1f} ms, {reps} runs each; first request {ms_first:.0f} ms")
    doc["complete"] = True
    save()
    log(f"wrote {args.out}")

    print("\n" + "=" * 100)
    print(f"{cpu}; {args.dtype}, {threads['intra_op']} threads; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; serving form {mode!r}; peak RSS {doc['peak_rss_bytes'] / 2**30:.1f} GiB; "
          f"{time.time() - t_start:.0f}s in all")
    print(f"{'case':32s} {'state':>6s} {'rows':>4s} {'input':>6s} {'new ms':>9s} {'p10-p90':>17s} {'cached ms':>10s} "
          f"{'runs':>5s}")
    for r in doc["cases"]:
        n, k = r["latency_new_ms"], r["latency_cached_ms"]
        print(f"{r['name']:32s} {r['state_tokens']:6d} {len(r['rows']):4d} {r['input_tokens']:6d} {n['median']:9.1f} "
              f"{n['p10']:8.1f}-{n['p90']:<8.1f} {k['median']:10.1f} {n['runs']:5d}")
    if mf.NOTES:
        print("\nNOTES")
        for n in mf.NOTES:
            print(f"  - {n}")


if __name__ == "__main__":
    main()
