#!/usr/bin/env python3
"""A Kev-4B-shaped random checkpoint in the released layout, for full-size parity and speed runs on a GPU; with
--shapes, the other sizes of Kev's family too (0.8b, 4b, 9b, 27b; --layers truncates, for a 27B that fits).

    PYTHONUNBUFFERED=1 python3 scripts/golden/make_kev4b.py OUTDIR --tokenizer .gold-in/tokenizer.json
    PYTHONUNBUFFERED=1 python3 scripts/golden/make_kev4b.py ROOT --shapes 0.8b,4b,9b --tokenizer ...   # ROOT/<shape>/

Writes OUTDIR/base (a Qwen3.5-4B-shaped `Qwen3_5ForConditionalGeneration`: text tower with the released 4B
dimensions, the smallest vision tower of the tiny fixtures, one fake MTP tensor; BF16 shards, A_log F32) and
OUTDIR/kev (PEFT LoRA adapter r=16 alpha=32 on Kev's 12 targets, head.pt with Kev-4B's metadata), both with the real
Qwen3 tokenizer. Weights are seeded random values at scales that keep activations O(1) through 32 layers
(FORMAT.md, "kev-4b"). Needs a CUDA GPU (the weights are built and checked there), torch, transformers (qwen3_5),
peft, tokenizers and safetensors; no network. Every file is read back and checked; a failed check stops the script
with "FAILED: ...".

scripts/golden/torch_reference.py runs the PyTorch serving reference on the result.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kevref  # noqa: E402
import make_fixtures as mf  # noqa: E402
from make_fixtures import F, L, expect, log  # noqa: E402
from transformers import AutoConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# The released Kev-4B / Qwen3.5-4B text shape (its released config.json), in make_fixtures' fixture form so its helpers apply.
FX = {
    "name": "kev-4b",
    "multimodal": True,
    "seed": 4004,
    "text": {
        "hidden_size": 2560, "num_hidden_layers": 32, "intermediate_size": 9216,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
        "partial_rotary_factor": 0.25, "rope_theta": 1e7,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
    },
    # config.json carries both layer_types and full_attention_interval, as the released configs do.
    "full_attention_interval": None, "layer_types": [L, L, L, F] * 8, "expect_layer_types": [L, L, L, F] * 8,
    "lora": {"r": 16, "alpha": 32, "rslora": False},
    "temperature": 2.41, "head_dim": 256,
    "base_id": "Qwen/Qwen3.5-4B-Base",
    "mtp": True,
}
FX4B = json.loads(json.dumps(FX))
# The family's text shapes (the released configs; Qwen3.8-27B: 64 layers, hidden 5120, 24 query / 4 KV heads, 16 / 48
# DeltaNet heads, MLP 17408, untied): the fields of FX["text"] that differ from the 4B's.
SHAPES = {
    "0.8b": {"text": {"hidden_size": 1024, "num_hidden_layers": 24, "intermediate_size": 3584,
                      "num_attention_heads": 8, "num_key_value_heads": 2, "linear_num_value_heads": 16,
                      "tie_word_embeddings": True},
             "seed": 8008, "base_id": "Qwen/Qwen3.5-0.8B-Base", "temperature": 2.2},
    "4b": {"text": {}, "seed": 4004, "base_id": "Qwen/Qwen3.5-4B-Base", "temperature": 2.41},
    "9b": {"text": {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 12288,
                    "num_attention_heads": 16, "num_key_value_heads": 4, "linear_num_value_heads": 32,
                    "tie_word_embeddings": False},
           "seed": 9009, "base_id": "Qwen/Qwen3.5-9B-Base", "temperature": 2.30},
    "27b": {"text": {"hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 17408,
                     "num_attention_heads": 24, "num_key_value_heads": 4, "linear_num_value_heads": 48,
                     "tie_word_embeddings": False},
            "seed": 27027, "base_id": "Qwen/Qwen3.8-27B", "temperature": 1.38},
}


def set_shape(shape, layers=None):
    """Points FX at one size of the family (the 4B is the default), optionally cut to its first `layers` layers."""
    global FX, SHARD_BYTES
    sh = SHAPES[shape]
    fx = json.loads(json.dumps(FX4B))
    fx["text"].update(sh["text"])
    n = layers or fx["text"]["num_hidden_layers"]
    expect(n % 4 == 0 and n <= fx["text"]["num_hidden_layers"], f"--layers {n}: want a multiple of 4 up to the model's")
    fx["text"]["num_hidden_layers"] = n
    fx["layer_types"] = fx["expect_layer_types"] = [L, L, L, F] * (n // 4)
    fx["name"] = f"kev-{shape}" + (f"-{n}l" if layers else "")
    fx["seed"], fx["base_id"], fx["temperature"] = sh["seed"], sh["base_id"], sh["temperature"]
    FX = fx
    # at least two shards, as the released bases have
    SHARD_BYTES = 4_000_000_000 if fx["text"]["hidden_size"] >= 2560 and n >= 16 else 500_000_000


BASE_REVISION = "1001bb4d826a52d1f399e183466143f4da7b741b"
VOCAB_SIZE = 248320
EOS_ID = 248044  # the released text config's eos_token_id (not a Qwen3 tokenizer id; Kev never generates)
MROPE_SECTION = [11, 11, 10]
MAX_POSITIONS = 262144
SHARD_BYTES = 4_000_000_000  # three shards of the ~8.4 GB base

# Standard deviations (FORMAT.md "kev-4b").
LINEAR_GAIN = 0.5  # linear weights: N(0, (0.5/sqrt(fan_in))^2)
NORM_SIGMA = 0.05  # (1 + w) norms: w ~ N(0, 0.05^2); gated norm: 1 + N(0, 0.05^2)
DT_BIAS_MEAN, DT_BIAS_SIGMA = -4.0, 0.5  # softplus(a + dt_bias) ~ 0.02: per-token decays mostly 0.6..0.99,
# so the DeltaNet state carries across 64-token chunks and into the question rows
CONV_SIGMA = 0.3
EMBED_SIGMA = 1.0
VISION_SIGMA = 0.02


def fill_text(tm, gen):
    """Seeded random text weights, generated on the GPU in fp32."""
    params = dict(tm.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            shape, dev = tuple(p.shape), p.device

            def randn():
                return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)

            if name.endswith("linear_attn.A_log"):
                v = torch.empty(shape, device=dev, dtype=torch.float32).uniform_(1.0, 16.0, generator=gen).log()
            elif name.endswith("linear_attn.dt_bias"):
                v = DT_BIAS_MEAN + DT_BIAS_SIGMA * randn()
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + NORM_SIGMA * randn()  # plain gain
            elif name.endswith("norm.weight"):
                v = NORM_SIGMA * randn()  # (1 + w) gains
            elif name.endswith("conv1d.weight"):
                v = CONV_SIGMA * randn()
            elif name == "embed_tokens.weight":
                v = EMBED_SIGMA * randn()
            elif mf.LINEAR.search(name):
                v = randn() * (LINEAR_GAIN / math.sqrt(shape[1]))
            else:
                mf.fail(f"no rule to initialise {name}")
            p.copy_(v)


def fill_vision(visual, gen):
    """The vision tower is never run: finite, small values (1-D weights 1, biases 0)."""
    with torch.no_grad():
        for name, p in sorted(visual.named_parameters()):
            if p.ndim == 1:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(VISION_SIGMA * torch.randn(tuple(p.shape), generator=gen, device=p.device))


def text_config():
    td = mf.text_config_dict(FX, VOCAB_SIZE, EOS_ID)
    td["rope_parameters"]["mrope_section"] = list(MROPE_SECTION)
    td["max_position_embeddings"] = MAX_POSITIONS
    return td


def build(tk, base_dir):
    """Builds the random base on the GPU, saves it, returns (model, text model, truth: canonical name -> GPU tensor
    with the stored dtype and values)."""
    t = FX["text"]
    cfg = Qwen3_5Config(
        text_config=text_config(),
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                       "in_channels": 3, "patch_size": 2, "temporal_patch_size": 2, "spatial_merge_size": 2,
                       "out_hidden_size": t["hidden_size"], "num_position_embeddings": 16},
        tie_word_embeddings=t["tie_word_embeddings"],
        image_token_id=tk.token_to_id("<|image_pad|>"), video_token_id=tk.token_to_id("<|video_pad|>"),
        vision_start_token_id=tk.token_to_id("<|vision_start|>"),
        vision_end_token_id=tk.token_to_id("<|vision_end|>"),
    )
    mf.check_text_config(FX, cfg.text_config)
    t0 = time.time()
    with torch.device("cuda"):
        model = Qwen3_5ForConditionalGeneration(cfg)
    tm = model.model.language_model
    log(f"constructed {type(model).__name__} on {torch.cuda.get_device_name(0)} in {time.time() - t0:.1f}s")
    expect(type(tm).__name__ == "Qwen3_5TextModel", f"text model is {type(tm).__name__}")
    mf.check_rotary(FX, tm)
    for i, kind in enumerate(FX["expect_layer_types"]):
        layer = tm.layers[i]
        expect(hasattr(layer, "linear_attn") == (kind == L) and hasattr(layer, "self_attn") == (kind == F),
               f"layer {i} is not {kind}")
    shapes = mf.expected_shapes(t, FX["expect_layer_types"], VOCAB_SIZE)
    got = {n: list(p.shape) for n, p in tm.named_parameters()}
    expect(set(got) == set(shapes), f"text tensors differ from the spec: extra {sorted(set(got) - set(shapes))[:5]}, "
                                    f"missing {sorted(set(shapes) - set(got))[:5]}")
    for n, s in shapes.items():
        expect(got[n] == s, f"{n}: shape {got[n]}, spec says {s}")
    n_params = sum(p.numel() for p in tm.parameters())
    log(f"text model: {len(shapes)} tensors, {n_params / 1e9:.3f} B parameters")

    t0 = time.time()
    gen = torch.Generator(device="cuda").manual_seed(FX["seed"])
    fill_text(tm, gen)
    fill_vision(model.model.visual, gen)
    a_log = {n: p.detach().clone() for n, p in tm.named_parameters() if n.endswith("A_log")}
    model.to(torch.bfloat16)
    for i, kind in enumerate(FX["expect_layer_types"]):
        if kind == L:
            tm.layers[i].linear_attn.A_log = nn.Parameter(a_log[f"layers.{i}.linear_attn.A_log"])
    tied = FX["text"]["tie_word_embeddings"]
    if tied and model.lm_head.weight.data_ptr() != tm.embed_tokens.weight.data_ptr():
        model.tie_weights()
    expect((model.lm_head.weight.data_ptr() == tm.embed_tokens.weight.data_ptr()) == tied,
           f"lm_head tied {not tied}, want {tied}")
    if not tied:
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 1.0 / math.sqrt(t["hidden_size"]), generator=gen)
    model.eval()
    truth = {n: p.detach() for n, p in tm.named_parameters()}
    for n, v in truth.items():
        want = torch.float32 if n.endswith("A_log") else torch.bfloat16
        expect(v.dtype == want, f"{n} is {v.dtype}, want {want}")
        expect(bool(torch.isfinite(v).all()), f"{n} has non-finite values")
    torch.cuda.synchronize()
    log(f"filled with seeded random values in {time.time() - t0:.1f}s")

    t0 = time.time()
    base_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(base_dir), max_shard_size=SHARD_BYTES)
    log(f"saved base to {base_dir} in {time.time() - t0:.1f}s")
    return model, tm, truth


def finish_config(base_dir):
    """make_fixtures.patch_config (released keys, layer_types kept), then full_attention_interval beside layer_types."""
    mf.patch_config(FX, base_dir)
    path = base_dir / "config.json"
    cfg = json.loads(path.read_text())
    tc = cfg["text_config"]
    tc["full_attention_interval"] = 4
    expect(tc["rope_parameters"].get("mrope_section") == MROPE_SECTION, f"mrope_section {tc['rope_parameters']}")
    expect(tc["rope_parameters"].get("mrope_interleaved") is True, "mrope_interleaved")
    expect(tc.get("max_position_embeddings") == MAX_POSITIONS, "max_position_embeddings")
    expect(tc.get("vocab_size") == VOCAB_SIZE, "vocab_size")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    back = AutoConfig.from_pretrained(str(base_dir), local_files_only=True)
    mf.check_text_config(FX, back.text_config)
    expect(list(back.text_config.rope_parameters.get("mrope_section")) == MROPE_SECTION, "mrope_section read back")


def verify_base(base_dir, truth, every=1):
    """Every tensor in the written shards, read back onto the GPU: names, dtypes, shapes, and the values of every
    `every`-th text tensor (all of them by default; a sample keeps a 51 GB base quick to check)."""
    _, idx = mf.read_index(base_dir)
    shards = sorted(set(idx["weight_map"].values()))
    expect(len(shards) >= 2, f"base has {len(shards)} shard(s), want >= 2")
    prefix = "model.language_model."
    seen, visual, mtp, head, compared = set(), 0, 0, 0, 0
    for shard in shards:
        header = mf.st_header(base_dir / shard)
        with safe_open(str(base_dir / shard), framework="pt", device="cuda") as f:
            for key, info in header.items():
                expect(idx["weight_map"].get(key) == shard, f"index does not place {key} in {shard}")
                if key.startswith("mtp."):
                    mtp += 1
                    continue
                if key == "lm_head.weight":
                    expect(not FX["text"]["tie_word_embeddings"], "lm_head.weight saved for tied embeddings")
                    head += 1
                    continue
                if key.startswith("model.visual."):
                    expect(info["dtype"] == "BF16", f"{key} is {info['dtype']}")
                    visual += 1
                    continue
                expect(key.startswith(prefix), f"unexpected tensor {key}")
                canon = key[len(prefix):]
                expect(canon in truth, f"unexpected tensor {key}")
                want = "F32" if canon.endswith("A_log") else "BF16"
                expect(info["dtype"] == want, f"{key} is {info['dtype']}, want {want}")
                expect(list(info["shape"]) == list(truth[canon].shape), f"{key} shape {info['shape']}")
                if len(seen) % every == 0:
                    expect(torch.equal(f.get_tensor(key), truth[canon]), f"{key} values differ from what was built")
                    compared += 1
                seen.add(canon)
    expect(seen == set(truth), f"missing from the files: {sorted(set(truth) - seen)[:5]}")
    expect(visual > 0, "no model.visual.* tensors")
    expect(mtp == 1, f"{mtp} mtp tensors")
    expect(head == (0 if FX["text"]["tie_word_embeddings"] else 1), f"{head} lm_head tensors")
    expect(len(idx["weight_map"]) == len(seen) + visual + mtp + head, "the index names tensors that no shard holds")
    expect(compared >= len(truth) // every, f"compared the values of {compared} tensors")
    return len(shards), visual, compared


def install_tokenizer(tok_path, cfg_path, dirs):
    """Copies the real Qwen3 tokenizer files into each of dirs; checks its ids fit the model's vocabulary."""
    expect(tok_path.is_file(), f"tokenizer {tok_path} not found")
    expect(cfg_path.is_file(), f"tokenizer config {cfg_path} not found")
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tok_path, d / "tokenizer.json")
        shutil.copyfile(cfg_path, d / "tokenizer_config.json")
    tk = Tokenizer.from_file(str(dirs[0] / "tokenizer.json"))
    n = tk.get_vocab_size(with_added_tokens=True)
    expect(n <= VOCAB_SIZE, f"tokenizer has {n} ids, the model only {VOCAB_SIZE}")
    ids = kevref.delimiter_ids(tk.token_to_id)
    expect(all(0 <= i < VOCAB_SIZE for i in ids.values()), f"delimiter ids {ids}")
    cfg = json.loads(cfg_path.read_text())
    pad = tk.token_to_id(cfg.get("pad_token") or "<|endoftext|>")
    expect(pad is not None and pad < VOCAB_SIZE, f"pad token {cfg.get('pad_token')!r}")
    probe = tk.encode("Shoes arrived two weeks late 😀 <think> 鞋子", add_special_tokens=False).ids
    expect(probe and max(probe) < VOCAB_SIZE, f"probe ids {probe}")
    log(f"tokenizer: {n} ids (< {VOCAB_SIZE}), delimiters {ids}, pad {pad}")
    return tk


def write_head(kev_dir, gen):
    head = mf.make_head(FX, gen)
    path = kev_dir / "head.pt"
    mf.save_head(FX, head, path, "lora", FX["lora"]["r"])
    # Kev-4B's own base revision (make_fixtures derives a fake one from the fixture name). The file was written just
    # above, so the full unpickler may read it: it keeps the state_dict's _metadata for the rewrite.
    meta = torch.load(str(path), map_location="cpu", weights_only=False)
    meta["base_revision"] = BASE_REVISION if FX["name"] == "kev-4b" else meta["base_revision"]
    torch.save(meta, str(path))
    back = torch.load(str(path), map_location="cpu", weights_only=True)
    expect(list(back) == list(meta), f"head.pt key order {list(back)}")
    expect(back["base"] == FX["base_id"] and back["base_revision"] == meta["base_revision"], "head.pt base / revision")
    expect(back["temperature"] == FX["temperature"] and back["head_dim"] == FX["head_dim"], "head.pt temperature")
    expect(back["lora"] == FX["lora"]["r"] and back["weights"] == "lora", "head.pt lora / weights")
    sd = head.state_dict()
    for k in ("q.weight", "q.bias", "k.weight", "k.bias"):
        expect(torch.equal(back["head"][k], sd[k]), f"head.pt {k}")
    expect(list(back["head"]["q.weight"].shape) == [FX["head_dim"], FX["text"]["hidden_size"]], "head shape")


def make_one(root, args):
    """Writes root/base and root/kev for the current FX; returns the seconds it took."""
    t_start = time.time()
    base_dir, kev_dir = root / "base", root / "kev"
    for d in (base_dir, kev_dir):
        if d.exists():
            shutil.rmtree(d)
    tk = install_tokenizer(args.tokenizer, args.tokenizer_config, [base_dir, kev_dir])

    model, tm, truth = build(tk, base_dir)
    t0 = time.time()
    mf.add_mtp(FX, base_dir, torch.Generator().manual_seed(FX["seed"] + 2))
    finish_config(base_dir)
    n_shards, n_visual, n_compared = verify_base(base_dir, truth, args.verify_every)
    log(f"base verified in {time.time() - t0:.1f}s: {n_shards} shards, {len(truth)} text tensors ({n_compared} "
        f"compared value by value), {n_visual} visual tensors, mtp.fc.weight")

    # Adapter on the same text model, widened to fp32 (PEFT then creates fp32 LoRA weights, as Kev's adapters are).
    t0 = time.time()
    del truth
    tm.to(torch.float32)
    gen = torch.Generator().manual_seed(FX["seed"] + 1)
    mf.make_adapter(FX, tm, kev_dir, gen)
    shapes = {n: torch.empty(s, device="meta")
              for n, s in mf.expected_shapes(FX["text"], FX["expect_layer_types"], VOCAB_SIZE).items()}
    n_adapter = mf.verify_adapter(FX, kev_dir, shapes)
    acfg = json.loads((kev_dir / "adapter_config.json").read_text())
    expect(acfg["base_model_name_or_path"] == FX["base_id"], "adapter base_model_name_or_path")
    log(f"adapter written and verified in {time.time() - t0:.1f}s: {n_adapter} tensors "
        f"(LoRA scale {mf.lora_scale(FX['lora'])})")
    write_head(kev_dir, gen)
    log("head.pt written and verified")
    del model, tm
    gc.collect()
    torch.cuda.empty_cache()

    rows = mf.file_table(root)
    total = sum(size for _, size, _ in rows)
    print("\n" + "=" * 100)
    print(f"{FX['name']}: {total / 1e9:.2f} GB in {len(rows)} files, {time.time() - t_start:.1f}s in all")
    for path, size, extra in rows:
        print(f"  {path:44s} {size:>14,d}  {extra}")
    (root / ".complete").write_text(FX["name"] + "\n")
    return time.time() - t_start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True, help="the Qwen3 tokenizer.json (uncompressed)")
    ap.add_argument("--tokenizer-config", type=Path, default=REPO / "tokenizer/testdata/qwen3-tokenizer_config.json",
                    help="the Qwen3 tokenizer_config.json (default: the copy under tokenizer/testdata)")
    ap.add_argument("--shapes", default="", help="comma-separated sizes (0.8b, 4b, 9b, 27b), each written to "
                    "OUTDIR/<size>; without it, the 4B into OUTDIR itself")
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers (a multiple of 4) of each size")
    ap.add_argument("--verify-every", type=int, default=1, help="read back the values of every N-th text tensor "
                    "(names, dtypes and shapes of all are checked); default 1, all")
    args = ap.parse_args()
    expect(args.verify_every >= 1, f"--verify-every {args.verify_every}: want >= 1")
    torch.set_grad_enabled(False)
    expect(torch.cuda.is_available(), "a CUDA GPU is needed")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import peft
    import transformers
    log(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
        f"peft {peft.__version__}")
    if not args.shapes:
        if args.layers:
            set_shape("4b", args.layers)
        make_one(args.outdir, args)
    else:
        for shape in args.shapes.split(","):
            expect(shape in SHAPES, f"--shapes: unknown size {shape!r} (want {', '.join(SHAPES)})")
            set_shape(shape, args.layers or None)
            make_one(args.outdir / shape, args)
    if mf.NOTES:
        print("\nNOTES")
        for n in mf.NOTES:
            print(f"  - {n}")


if __name__ == "__main__":
    main()
