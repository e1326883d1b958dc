#!/usr/bin/env python3
"""Golden fixtures for Kev's attention-only bases: a tiny random Kev checkpoint on a Qwen3 base (tiny-qwen3) and one
on a Qwen2.5 base (tiny-qwen2), in the released layout, with the PyTorch reference's outputs computed the way Kev runs
these bases: the packed block-causal pass. FORMAT.md (beside this file, "Attention-only bases") says what is written.

    PYTHONUNBUFFERED=1 python3 scripts/golden/make_fixtures_attn.py OUTDIR

Needs torch, transformers (qwen3, qwen2), peft, tokenizers and safetensors, and make_fixtures.py and kevref.py beside
it (the tokenizer, head.pt, adapter checks and requests are theirs). CPU, fp32, fixed seeds, no network; every step
checks what it wrote and stops with "FAILED: ..." when a check does not hold.

The reference pass, as Kev's DecisionModel runs an attention-only backbone (kev/model.py: encode, branch_mask_batch,
hidden_batch): the state and every question branch in ONE sequence; positions 0..Ls-1 for the state and Ls, Ls+1, ...
for each branch (every branch restarts right after the state); an additive mask with attend(i, j) iff j <= i and
(seg[j] == 0 or seg[j] == seg[i]) (the diagonal always allowed), finfo(float32).min elsewhere; eager attention.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from collections import OrderedDict  # noqa: E402
from pathlib import Path  # noqa: E402

import safetensors  # noqa: E402
import safetensors.torch as st  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import peft  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kevref  # noqa: E402
import make_fixtures as mf  # noqa: E402

log, fail, expect, note = mf.log, mf.fail, mf.expect, mf.note

# Kev's LoRA targets on attention-only backbones (kev/model.py, lora_targets "all").
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

FIXTURES = [
    {
        "name": "tiny-qwen3",
        "arch": "qwen3",  # Qwen3ForCausalLM: q/k RMSNorm (plain w gain), no biases
        "seed": 3003,
        "vocab_target": 700,
        "text": {
            "hidden_size": 32, "num_hidden_layers": 3, "intermediate_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,  # head_dim != d / heads
            "rope_theta": 1e6, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
        },
        # config.json in the form the released Qwen3 bases have it (transformers 4.51): top-level rope_theta,
        # rope_scaling null, use_sliding_window false, sliding_window null, max_window_layers, no layer_types.
        "legacy_config": True,
        "lora": {"r": 8, "alpha": 16, "rslora": False},
        "temperature": 2.41, "head_dim": 24,
        "base_id": "Qwen/Qwen3-Tiny-Base",
        "shard_bytes": 40_000,
        "requests": ["ticket", "hostile", "unicode", "options"],
    },
    {
        "name": "tiny-qwen2",
        "arch": "qwen2",  # Qwen2ForCausalLM (Qwen2.5): q/k/v biases, no q/k norm, head_dim = d / heads
        "seed": 4004,
        "vocab_target": 680,
        "text": {
            "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 80,
            "num_attention_heads": 2, "num_key_value_heads": 1,
            "rope_theta": 1e4, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
        },
        "legacy_config": False,  # as transformers 5 saves it (rope_parameters, layer_types)
        "lora": {"r": 4, "alpha": 8, "rslora": True},
        "temperature": 1.7, "head_dim": 16,
        "base_id": "Qwen/Qwen2.5-Tiny",
        "shard_bytes": 40_000,
        "requests": ["ticket", "hostile", "unicode", "options"],
    },
]

MAX_FIXTURE_BYTES = 1_500_000


def model_classes(arch):
    if arch == "qwen3":
        return transformers.Qwen3Config, transformers.Qwen3ForCausalLM
    return transformers.Qwen2Config, transformers.Qwen2ForCausalLM


def head_dim_of(fx):
    t = fx["text"]
    return t.get("head_dim", t["hidden_size"] // t["num_attention_heads"])


def expected_shapes(fx, vocab_size):
    """Canonical text tensor name -> shape."""
    t = fx["text"]
    d, h, kv, hd, inter = (t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], head_dim_of(fx),
                           t["intermediate_size"])
    shapes = {"embed_tokens.weight": [vocab_size, d], "norm.weight": [d]}
    for i in range(t["num_hidden_layers"]):
        p = f"layers.{i}."
        a = p + "self_attn."
        shapes.update({
            p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
            p + "mlp.gate_proj.weight": [inter, d], p + "mlp.up_proj.weight": [inter, d],
            p + "mlp.down_proj.weight": [d, inter],
            a + "q_proj.weight": [h * hd, d], a + "k_proj.weight": [kv * hd, d],
            a + "v_proj.weight": [kv * hd, d], a + "o_proj.weight": [d, h * hd],
        })
        if fx["arch"] == "qwen3":
            shapes.update({a + "q_norm.weight": [hd], a + "k_norm.weight": [hd]})
        else:
            shapes.update({a + "q_proj.bias": [h * hd], a + "k_proj.bias": [kv * hd], a + "v_proj.bias": [kv * hd]})
    return shapes


def fill_params(tm, gen):
    """Random parameters at scales that keep activations O(1): embeddings σ 1, linear weights σ 1/√in, plain
    RMSNorm gains 1 + (σ 0.1) (these bases multiply by w, not 1 + w), attention biases σ 0.5."""
    params = dict(tm.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):
                v = 1.0 + 0.1 * torch.randn(shape, generator=gen)
            elif name == "embed_tokens.weight":
                v = torch.randn(shape, generator=gen)
            elif name.endswith("_proj.bias"):
                v = 0.5 * torch.randn(shape, generator=gen)
            elif mf.LINEAR.search(name):
                v = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
            else:
                fail(f"no rule to initialise {name}")
            p.copy_(v)


def check_config(fx, cfg):
    t = fx["text"]
    for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "tie_word_embeddings"):
        expect(getattr(cfg, k) == t[k], f"config {k}: {getattr(cfg, k)} != {t[k]}")
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
    expect(theta == t["rope_theta"], f"rope theta {theta} (rope_parameters {rp})")
    lt = getattr(cfg, "layer_types", None)
    expect(lt is None or all(x == "full_attention" for x in lt), f"layer_types {lt}")


def build_base(fx, tk, base_dir):
    t = fx["text"]
    vocab_len = tk.get_vocab_size(with_added_tokens=True)
    vocab_size = -(-vocab_len // 64) * 64
    eos = tk.token_to_id("<|endoftext|>")
    cfg_cls, model_cls = model_classes(fx["arch"])
    kw = {k: v for k, v in t.items() if k != "rope_theta"}
    kw.update({"vocab_size": vocab_size, "hidden_act": "silu", "max_position_embeddings": 4096,
               "rope_parameters": {"rope_type": "default", "rope_theta": t["rope_theta"]},
               "use_sliding_window": False, "max_window_layers": t["num_hidden_layers"],
               "bos_token_id": eos, "eos_token_id": eos, "attention_dropout": 0.0})
    if fx["arch"] == "qwen3":
        kw["attention_bias"] = False
    torch.manual_seed(fx["seed"])
    cfg = cfg_cls(**kw)
    check_config(fx, cfg)
    model = model_cls(cfg)
    tm = model.model
    shapes = expected_shapes(fx, vocab_size)
    got = {n: list(p.shape) for n, p in tm.named_parameters()}
    expect(set(got) == set(shapes), f"text tensors differ: extra {sorted(set(got) - set(shapes))}, "
                                    f"missing {sorted(set(shapes) - set(got))}")
    for n, s in shapes.items():
        expect(got[n] == s, f"{n}: shape {got[n]}, want {s}")
    hd = head_dim_of(fx)
    want = 1.0 / (t["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    inv = tm.rotary_emb.inv_freq.float()
    expect(inv.shape == want.shape and torch.allclose(inv, want, rtol=1e-6, atol=0), "rotary inv_freq (full rotary)")

    gen = torch.Generator().manual_seed(fx["seed"])
    fill_params(tm, gen)
    if t["tie_word_embeddings"]:
        if model.lm_head.weight.data_ptr() != tm.embed_tokens.weight.data_ptr():
            model.tie_weights()
        expect(model.lm_head.weight.data_ptr() == tm.embed_tokens.weight.data_ptr(), "lm_head is not tied")
    else:
        with torch.no_grad():
            model.lm_head.weight.copy_(torch.randn(tuple(model.lm_head.weight.shape), generator=gen)
                                       / math.sqrt(t["hidden_size"]))
    truth = {n: p.detach().to(torch.bfloat16).float() for n, p in tm.named_parameters()}
    if not t["tie_word_embeddings"]:
        truth["lm_head.weight"] = model.lm_head.weight.detach().to(torch.bfloat16).float()
    model.to(torch.bfloat16)
    model.eval()
    base_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(base_dir), max_shard_size=fx["shard_bytes"])
    log(f"saved base {type(model).__name__} to {base_dir}")
    return truth, vocab_size


def patch_config(fx, base_dir):
    """tiny-qwen3: rewrite config.json in the released Qwen3 bases' (transformers 4.51) form."""
    path = base_dir / "config.json"
    cfg = json.loads(path.read_text())
    expect(cfg.get("model_type") == fx["arch"], f"model_type {cfg.get('model_type')}")
    if fx["legacy_config"]:
        rp = cfg.pop("rope_parameters", None) or {}
        cfg.pop("layer_types", None)
        cfg["rope_theta"] = rp.get("rope_theta", fx["text"]["rope_theta"])
        cfg["rope_scaling"] = None
        cfg["use_sliding_window"] = False
        cfg["sliding_window"] = None
        cfg["max_window_layers"] = fx["text"]["num_hidden_layers"]
        cfg["torch_dtype"] = "bfloat16"
        cfg.pop("dtype", None)
        saved = path.read_text()
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        try:
            back = AutoConfig.from_pretrained(str(base_dir), local_files_only=True)
            check_config(fx, back)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - reported; the saved form is kept instead
            note(f"{fx['name']}: transformers does not read the released-form config back "
                 f"({type(e).__name__}: {e}); keeping the form save_pretrained wrote")
            path.write_text(saved)
            cfg = json.loads(saved)
            check_config(fx, AutoConfig.from_pretrained(str(base_dir), local_files_only=True))
    else:
        back = AutoConfig.from_pretrained(str(base_dir), local_files_only=True)
        check_config(fx, back)
    return cfg


def load_text_model(fx, base_dir, truth):
    """The base's text model in fp32 as Kev loads it (AutoModelForCausalLM(...).model), eager attention, checked
    tensor by tensor against what was built."""
    lm = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32, attn_implementation="eager",
                                              local_files_only=True)
    tm = lm.model
    got = dict(tm.named_parameters())
    want = {k: v for k, v in truth.items() if k != "lm_head.weight"}
    expect(set(got) == set(want), f"loaded tensor names differ: {sorted(set(got) ^ set(want))[:6]}")
    for n, p in got.items():
        expect(p.dtype == torch.float32 and torch.equal(p.detach(), want[n]), f"{n} differs from the written values")
    return tm.eval()


def make_adapter(fx, tm, kev_dir, gen):
    lo = fx["lora"]
    lcfg = LoraConfig(r=lo["r"], lora_alpha=lo["alpha"], target_modules=list(TARGETS), lora_dropout=0.05,
                      task_type="FEATURE_EXTRACTION", use_rslora=lo["rslora"], bias="none")
    pm = get_peft_model(tm, lcfg)
    s = mf.lora_scale(lo)
    sigma_b = 0.3 / (s * math.sqrt(lo["r"]))
    lora = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    n_a = sum(1 for n in lora if ".lora_A." in n)
    expect(n_a == 7 * fx["text"]["num_hidden_layers"], f"{n_a} LoRA modules")
    with torch.no_grad():
        for n in sorted(lora):
            p = lora[n]
            if ".lora_A." in n:
                p.copy_(torch.randn(tuple(p.shape), generator=gen) / math.sqrt(p.shape[1]))
            elif ".lora_B." in n:
                p.copy_(torch.randn(tuple(p.shape), generator=gen) * sigma_b)
            else:
                fail(f"unexpected LoRA parameter {n}")
    kev_dir.mkdir(parents=True, exist_ok=True)
    pm.save_pretrained(str(kev_dir), save_embedding_layers=False)
    readme = kev_dir / "README.md"
    if readme.exists():
        readme.unlink()
    cfg_path = kev_dir / "adapter_config.json"
    acfg = json.loads(cfg_path.read_text())
    acfg["base_model_name_or_path"] = fx["base_id"]
    cfg_path.write_text(json.dumps(acfg, indent=2, sort_keys=True) + "\n")
    expect(acfg.get("peft_type") == "LORA" and acfg.get("task_type") == "FEATURE_EXTRACTION", "peft/task type")
    expect(sorted(acfg.get("target_modules") or []) == sorted(TARGETS), f"target_modules {acfg.get('target_modules')}")


# ---------------------------------------------------------------------------------------------------------------
# Kev's packed block-causal pass

def packed_layout(state_ids, rows):
    """ids, seg, pos of Kev's packed record (kev/model.py encode): the state (segment 0) at positions 0..Ls-1, then
    question k's branch (segment k) at positions Ls, Ls+1, ...; and each branch's offset in the sequence."""
    ls = len(state_ids)
    ids, seg, pos, offs = list(state_ids), [0] * ls, list(range(ls)), []
    for k, r in enumerate(rows, start=1):
        offs.append(len(ids))
        ids += r["ids"]
        seg += [k] * len(r["ids"])
        pos += list(range(ls, ls + len(r["ids"])))
    return ids, seg, pos, offs


def branch_mask(seg, dtype=torch.float32):
    """Kev's block-causal additive mask [1, 1, L, L]: attend(i, j) iff j <= i and (seg[j] == 0 or seg[j] == seg[i]);
    the diagonal is always allowed; masked entries hold finfo(dtype).min."""
    n = len(seg)
    s = torch.tensor(seg)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    same = (s[None, :] == s[:, None]) | (s[None, :] == 0)
    allow = (causal & same) | torch.eye(n, dtype=torch.bool)
    return torch.zeros(1, 1, n, n, dtype=dtype).masked_fill(~allow, torch.finfo(dtype).min)


def packed_forward(tm, cap, ids, seg, pos):
    n_layers = len(tm.layers)
    cap.out, cap.active = [], True
    with torch.no_grad():
        out = tm(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), attention_mask=branch_mask(seg),
                 use_cache=False)
    cap.active = False
    hs = cap.out
    expect(len(hs) == n_layers + 2, f"captured {len(hs)} hidden states, want {n_layers + 2}")
    expect(torch.equal(out.last_hidden_state[0].float(), hs[-1]), "final norm hook differs from last_hidden_state")
    for h in hs:
        expect(list(h.shape) == [len(ids), tm.config.hidden_size] and h.dtype == torch.float32, "hidden shape")
        expect(bool(torch.isfinite(h).all()), "non-finite hidden state")
    return hs


def cached_branches(tm, state_ids, rows, seg, ref_final):
    """Kev's cache hit (probs_with_prefix): the state into a DynamicCache, then all branches in one pass with the
    mask's branch rows; returns max |diff| of the branch finals against the packed pass, or None with a reason."""
    try:
        ls = len(state_ids)
        with torch.no_grad():
            s = tm(input_ids=torch.tensor([state_ids]), position_ids=torch.arange(ls)[None],
                   past_key_values=transformers.DynamicCache(config=tm.config), use_cache=True)
            ids = [i for r in rows for i in r["ids"]]
            pos = [ls + j for r in rows for j in range(len(r["ids"]))]
            mask = branch_mask(seg)[:, :, ls:, :]
            out = tm(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), attention_mask=mask,
                     past_key_values=s.past_key_values, use_cache=True)
        return (out.last_hidden_state[0] - ref_final[ls:]).abs().max().item(), ""
    except Exception as e:  # noqa: BLE001 - reported, never faked
        return None, f"{type(e).__name__}: {e}"


def run_cases(fx, tm, head, tk, requests, ids_map):
    tokenize = lambda text: tk.encode(text, add_special_tokens=False).ids  # noqa: E731
    special_ids = {tk.token_to_id(c) for c, s in mf.QWEN_ADDED if s}
    delim = set(ids_map.values())
    cap = mf.Capture(tm)
    cases, hidden = [], {}
    stats = {"max_p": 0.0, "min_p": 1.0, "rows": 0, "tokens": 0, "rows_vs_packed": 0.0, "cached": []}
    n_layers = len(tm.layers)
    dp = fx["head_dim"]
    for ci, (name, raw) in enumerate(requests):
        req = json.loads(raw)
        state_text, questions, meta = kevref.to_record(req)
        state_ids, rows = kevref.encode(state_text, questions, tokenize, ids_map)
        all_ids = state_ids + [i for r in rows for i in r["ids"]]
        n_delim = 1 + sum(2 + 2 * len(q["options"]) for q in questions)
        expect(sum(1 for i in all_ids if i in delim) == n_delim, f"{name}: delimiter count")
        expect(sum(1 for i in all_ids if i in special_ids) == n_delim, f"{name}: a special id leaked from user text")
        ls = len(state_ids)
        pids, seg, pos, offs = packed_layout(state_ids, rows)
        hs = packed_forward(tm, cap, pids, seg, pos)
        final = hs[-1]
        probs, out_rows = [], []
        for qi, row in enumerate(rows):
            # decide / opts index the full row state_ids + ids; in the packed sequence the branch starts at offs[qi].
            d_at = offs[qi] + row["decide"] - ls
            o_at = [offs[qi] + o - ls for o in row["opts"]]
            expect(pids[d_at] == ids_map["decide"], f"{name}: <decide> not where the layout puts it")
            expect(all(pids[o] == ids_map["/opt"] for o in o_at), f"{name}: </opt> not where the layout puts it")
            p, logits = mf.pointer(head, final, d_at, o_at, fx["temperature"], dp)
            expect(abs(p.sum().item() - 1.0) < 1e-5, f"{name}: probabilities do not sum to 1")
            probs.append(p.tolist())
            stats["max_p"] = max(stats["max_p"], max(p.tolist()))
            stats["min_p"] = min(stats["min_p"], min(p.tolist()))
            stats["rows"] += 1
            out_rows.append({"qid": meta[qi]["id"], "ids": row["ids"], "decide": row["decide"], "opts": row["opts"],
                             "texts": {"instr": questions[qi]["instr"], "options": questions[qi]["options"]},
                             "logits": logits.tolist()})
            n = len(row["ids"])
            for li in range(n_layers + 1):
                hidden[f"c{ci}.q{qi}.l{li}"] = hs[li][offs[qi]:offs[qi] + n].contiguous()
            hidden[f"c{ci}.q{qi}.final"] = final[offs[qi]:offs[qi] + n].contiguous()
            # Kev's row form (rows_of): state + branch as one causal row equals the packed form (fp32 noise).
            full = mf.forward_row(tm, cap, state_ids + row["ids"])
            diff = max((a - torch.cat([h[:ls], h[offs[qi]:offs[qi] + n]])).abs().max().item()
                       for a, h in zip(full, hs))
            expect(diff <= 1e-4, f"{name} q{qi}: the row form differs from the packed form by {diff}")
            stats["rows_vs_packed"] = max(stats["rows_vs_packed"], diff)
        for li in range(n_layers + 1):
            hidden[f"c{ci}.state.l{li}"] = hs[li][:ls].contiguous()
        hidden[f"c{ci}.state.final"] = final[:ls].contiguous()
        stats["tokens"] += len(pids)
        cap.active = False
        worst, why = cached_branches(tm, state_ids, rows, seg, final)
        stats["cached"].append((name, worst, why))
        answers = kevref.to_answers(meta, probs)
        usage_text = kevref.answers_usage_text(answers)
        cases.append({
            "name": name,
            "request": f"@@REQUEST{ci}@@",
            "state_text": state_text,
            "state_ids": state_ids,
            "rows": out_rows,
            "input_tokens": len(pids),
            "probabilities": probs,
            "answers_json": kevref.answers_body_json(answers),
            "output_text": usage_text,
            "output_tokens": len(tokenize(usage_text)),
        })
    cap.remove()
    bad = [(n, w, why) for n, w, why in stats["cached"] if w is None or w > 1e-4]
    if bad:
        note(f"{fx['name']}: Kev's cached-state pass did not match the packed pass: {bad}")
    return cases, hidden, stats


def make_fixture(fx, out):
    name = fx["name"]
    root = out / name
    if root.exists():
        shutil.rmtree(root)
    base_dir, kev_dir, ref_dir = root / "base", root / "kev", root / "reference"
    ref_dir.mkdir(parents=True)
    log(f"===== {name}")
    torch.manual_seed(fx["seed"])
    tk = mf.build_tokenizer(fx, [base_dir, kev_dir])
    ids_map = kevref.delimiter_ids(tk.token_to_id)
    pad_id = tk.token_to_id("<|endoftext|>")

    truth, vocab_size = build_base(fx, tk, base_dir)
    patch_config(fx, base_dir)
    vfx = {"mtp": False, "multimodal": False, "text": fx["text"]}
    n_shards, _ = mf.verify_base(vfx, base_dir, truth, "model.")
    log(f"{name}: base verified: {n_shards} shards, {len(truth)} tensors")

    tm_ref = load_text_model(fx, base_dir, truth)
    gen = torch.Generator().manual_seed(fx["seed"] + 1)
    make_adapter(fx, load_text_model(fx, base_dir, truth), kev_dir, gen)
    n_adapter = mf.verify_adapter(fx, kev_dir, truth)
    log(f"{name}: adapter verified: {n_adapter} tensors")

    head = mf.make_head(fx, gen)
    mf.save_head(fx, head, kev_dir / "head.pt", "lora", fx["lora"]["r"])

    merged, targets = mf.hand_merge(fx, kev_dir, truth)
    expect(len(targets) == 7 * fx["text"]["num_hidden_layers"], f"{len(targets)} merge targets")
    tm_merged = mf.set_params(load_text_model(fx, base_dir, truth), merged)
    pm = PeftModel.from_pretrained(load_text_model(fx, base_dir, truth), str(kev_dir))
    pd = dict(pm.merge_and_unload().named_parameters())
    expect(set(pd) == set(merged), "merge_and_unload tensor names")
    merge_diff = max((pd[n].detach() - merged[n]).abs().max().item() for n in merged)
    expect(merge_diff <= 1e-6, f"merge_and_unload differs from fp32(W) + (B@A)·s by {merge_diff}")
    log(f"{name}: PEFT merge_and_unload vs hand merge: max |diff| {merge_diff:.3g} over {len(targets)} targets")

    requests = [(n, r) for n, r in mf.RAW_REQUESTS if n in fx["requests"]]
    expect(len(requests) == len(fx["requests"]), "requests")
    tokenize = lambda text: tk.encode(text, add_special_tokens=False).ids  # noqa: E731
    st0, q0 = kevref.to_record(json.loads(requests[0][1]))[:2]
    s_ids, rws = kevref.encode(st0, q0, tokenize, ids_map)
    row = torch.tensor([s_ids + rws[0]["ids"]])
    pm2 = PeftModel.from_pretrained(load_text_model(fx, base_dir, truth), str(kev_dir))
    pm2.eval()
    with torch.no_grad():
        h_lora = pm2.get_base_model()(input_ids=row, use_cache=False).last_hidden_state
        h_merged = tm_merged(input_ids=row, use_cache=False).last_hidden_state
        h_base = tm_ref(input_ids=row, use_cache=False).last_hidden_state
    lora_diff = (h_lora - h_merged).abs().max().item()
    lora_effect = (h_base - h_merged).abs().max().item()
    expect(lora_diff < 1e-4, f"unmerged LoRA forward differs from the merged model by {lora_diff}")
    expect(lora_effect > 1e-2, f"the adapter barely changes the output ({lora_effect})")
    log(f"{name}: unmerged LoRA vs merged {lora_diff:.3g}; adapter moves the output by {lora_effect:.3g}")

    out_t = OrderedDict()
    for n in sorted(merged):
        out_t[n] = merged[n].contiguous()
        out_t[n + ".bf16"] = merged[n].to(torch.bfloat16).contiguous()
    st.save_file(out_t, str(ref_dir / "merged.safetensors"),
                 metadata={"fixture": name, "lora_scale": repr(mf.lora_scale(fx["lora"])),
                           "lora_targets": str(len(targets))})
    st.save_file(OrderedDict((k, v.detach().contiguous()) for k, v in head.state_dict().items()),
                 str(ref_dir / "head.safetensors"),
                 metadata={"temperature": repr(fx["temperature"]), "head_dim": str(fx["head_dim"])})

    header = OrderedDict([
        ("fixture", name),
        ("form", "packed block-causal"),
        ("delimiters", ids_map),
        ("pad_id", pad_id),
        ("vocab_size", vocab_size),
        ("temperature", fx["temperature"]),
        ("head_dim", fx["head_dim"]),
        ("lora_scale", mf.lora_scale(fx["lora"])),
        ("generator", {"torch": torch.__version__, "transformers": transformers.__version__,
                       "peft": peft.__version__, "tokenizers": tokenizers.__version__,
                       "safetensors": safetensors.__version__}),
    ])
    cases, hidden, stats = run_cases(fx, tm_merged, head, tk, requests, ids_map)
    mf.write_cases(ref_dir / "cases.json", header, cases, requests)
    st.save_file(OrderedDict(sorted(hidden.items())), str(ref_dir / "hidden.safetensors"), metadata={"fixture": name})
    files = mf.file_table(root)
    total = sum(size for _, size, _ in files)
    expect(total < MAX_FIXTURE_BYTES, f"{name} is {total} bytes, over {MAX_FIXTURE_BYTES}")
    return {"stats": stats, "merge_diff": merge_diff, "lora_diff": lora_diff, "n_shards": n_shards, "files": files,
            "total": total,
            "cases": [(c["name"], len(c["state_ids"]), len(c["rows"]), c["input_tokens"],
                       max(max(p) for p in c["probabilities"])) for c in cases]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--only", help="make only this fixture")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
        f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}")
    args.outdir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for fx in FIXTURES:
        if args.only and fx["name"] != args.only:
            continue
        summaries[fx["name"]] = make_fixture(fx, args.outdir)
    print("\n" + "=" * 100)
    print("SUMMARY")
    for name, s in summaries.items():
        print(f"\n{name}: {s['total'] / 1e6:.2f} MB in {len(s['files'])} files; base in {s['n_shards']} shards; "
              f"PEFT merge diff {s['merge_diff']:.3g}; LoRA forward vs merged {s['lora_diff']:.3g}")
        for path, size, extra in s["files"]:
            print(f"  {path:44s} {size:>10,d}  {extra}")
        st_ = s["stats"]
        print(f"  rows {st_['rows']}, packed tokens {st_['tokens']}, probabilities in [{st_['min_p']:.4f}, "
              f"{st_['max_p']:.4f}], row form vs packed max |diff| {st_['rows_vs_packed']:.3g}")
        for cname, ns, nr, ni, mp in s["cases"]:
            print(f"  {cname:12s} state {ns:4d} rows {nr:2d} packed {ni:5d} max p {mp:.4f}")
        for cname, w, why in st_["cached"]:
            print(f"  cached-state pass {cname:12s} " + (f"max |diff| {w:.3g}" if w is not None else why))
    if mf.NOTES:
        print("\nNOTES")
        for n in mf.NOTES:
            print(f"  - {n}")
    print(f"\ndone in {mf.time.time() - mf.T0:.1f}s")


if __name__ == "__main__":
    main()
