#!/usr/bin/env python3
"""A Kev-4B@qwen3-shaped random checkpoint in the released layout: Kev's previous generation on an attention-only
Qwen3 base, for full-size parity and speed runs on a GPU.

    PYTHONUNBUFFERED=1 python3 scripts/golden/make_kev_qwen3.py OUTDIR --tokenizer .gold-in/tokenizer.json

Writes OUTDIR/base (a `Qwen3ForCausalLM` with Qwen3-4B-Base's shape: d 2560, 36 layers, MLP 9728, 32 heads / 8 KV
heads of 128, full rotary θ 1e6, vocab 151,936, tied embeddings; BF16 shards, config.json in the released
transformers 4.51 form) and OUTDIR/kev (PEFT LoRA r 16, alpha 32 on Kev's 7 attention-only targets, head.pt with
base "Qwen/Qwen3-4B-Base", head_dim 256, temperature 2.41), both with the real Qwen3 tokenizer. Seeded random
weights (CUDA generator, drawn in fp32, stored rounded to BF16): embeddings σ 1, linear weights σ 0.5/√in, every
RMSNorm gain (plain w) 1 + N(0, 0.05²). Needs a CUDA GPU, torch, transformers (qwen3), peft, tokenizers and
safetensors; no network. Every file is read back and checked; a failed check stops with "FAILED: ...".

scripts/golden/torch_reference.py runs the PyTorch serving reference on the result (Kev's packed block-causal form);
scripts/gpu/bench.sh with MAKE_SCRIPT=scripts/golden/make_kev_qwen3.py runs both sides and compares them.
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
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402
import make_fixtures_attn as mfa  # noqa: E402
import make_kev4b  # noqa: E402
from make_fixtures import expect, log  # noqa: E402
from transformers import AutoConfig, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

FX = {
    "name": "kev-4b-qwen3",
    "arch": "qwen3",
    "seed": 6006,
    "text": {
        "hidden_size": 2560, "num_hidden_layers": 36, "intermediate_size": 9728,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 1e6, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
    },
    "legacy_config": True,
    "lora": {"r": 16, "alpha": 32, "rslora": False},
    "temperature": 2.41, "head_dim": 256,
    "base_id": "Qwen/Qwen3-4B-Base",
}
VOCAB_SIZE = 151936
EOS_ID = 151643
SHARD_BYTES = 4_000_000_000
LINEAR_GAIN, NORM_SIGMA, EMBED_SIGMA = 0.5, 0.05, 1.0


def build(base_dir):
    t0 = time.time()
    t = FX["text"]
    kw = {k: v for k, v in t.items() if k != "rope_theta"}
    kw.update({"vocab_size": VOCAB_SIZE, "hidden_act": "silu", "max_position_embeddings": 32768,
               "rope_parameters": {"rope_type": "default", "rope_theta": t["rope_theta"]},
               "use_sliding_window": False, "max_window_layers": t["num_hidden_layers"], "attention_bias": False,
               "bos_token_id": EOS_ID, "eos_token_id": EOS_ID})
    cfg = Qwen3Config(**kw)
    mfa.check_config(FX, cfg)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg)
    tm = model.model
    shapes = mfa.expected_shapes(FX, VOCAB_SIZE)
    got = {n: list(p.shape) for n, p in tm.named_parameters()}
    expect(got == shapes, f"text tensors differ from Qwen3-4B's: {sorted(set(got) ^ set(shapes))[:6]}")
    gen = torch.Generator(device="cuda").manual_seed(FX["seed"])
    with torch.no_grad():
        for name, p in sorted(tm.named_parameters()):
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):
                v = 1.0 + NORM_SIGMA * torch.randn(shape, generator=gen, device="cuda")
            elif name == "embed_tokens.weight":
                v = EMBED_SIGMA * torch.randn(shape, generator=gen, device="cuda")
            elif mf.LINEAR.search(name):
                v = LINEAR_GAIN / math.sqrt(shape[1]) * torch.randn(shape, generator=gen, device="cuda")
            else:
                mf.fail(f"no rule to initialise {name}")
            p.copy_(v)
    if model.lm_head.weight.data_ptr() != tm.embed_tokens.weight.data_ptr():
        model.tie_weights()
    expect(model.lm_head.weight.data_ptr() == tm.embed_tokens.weight.data_ptr(), "lm_head is not tied")
    model.to(torch.bfloat16).eval()
    truth = {n: p.detach() for n, p in tm.named_parameters()}
    n_params = sum(p.numel() for p in truth.values())
    base_dir.mkdir(parents=True, exist_ok=True)
    t1 = time.time()
    model.save_pretrained(str(base_dir), max_shard_size=SHARD_BYTES)
    log(f"built {n_params / 1e9:.3f} B text parameters in {t1 - t0:.1f}s; saved base in {time.time() - t1:.1f}s")
    return model, tm, truth


def verify_base(base_dir, truth):
    _, idx = mf.read_index(base_dir)
    shards = sorted(set(idx["weight_map"].values()))
    expect(len(shards) >= 2, f"base has {len(shards)} shard(s)")
    seen = set()
    for shard in shards:
        header = mf.st_header(base_dir / shard)
        with safe_open(str(base_dir / shard), framework="pt", device="cuda") as f:
            for key, info in header.items():
                expect(key.startswith("model."), f"unexpected tensor {key}")
                canon = key[len("model."):]
                expect(canon in truth, f"unexpected tensor {key}")
                expect(info["dtype"] == "BF16", f"{key} is {info['dtype']}")
                expect(torch.equal(f.get_tensor(key), truth[canon]), f"{key} values differ from what was built")
                seen.add(canon)
    expect(seen == set(truth), f"missing from the files: {sorted(set(truth) - seen)[:5]}")
    return len(shards)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True, help="the Qwen3 tokenizer.json (uncompressed)")
    ap.add_argument("--tokenizer-config", type=Path, default=REPO / "tokenizer/testdata/qwen3-tokenizer_config.json")
    args = ap.parse_args()
    t_start = time.time()
    torch.set_grad_enabled(False)
    expect(torch.cuda.is_available(), "a CUDA GPU is needed")
    torch.backends.cuda.matmul.allow_tf32 = False
    root = args.outdir
    base_dir, kev_dir = root / "base", root / "kev"
    for d in (base_dir, kev_dir):
        if d.exists():
            shutil.rmtree(d)
    tk = make_kev4b.install_tokenizer(args.tokenizer, args.tokenizer_config, [base_dir, kev_dir])
    expect(tk.get_vocab_size(with_added_tokens=True) <= VOCAB_SIZE, "tokenizer ids beyond Qwen3's vocabulary")

    model, tm, truth = build(base_dir)
    mfa.patch_config(FX, base_dir)
    back = AutoConfig.from_pretrained(str(base_dir), local_files_only=True)
    expect(back.model_type == "qwen3", f"model_type {back.model_type}")
    t0 = time.time()
    n_shards = verify_base(base_dir, truth)
    log(f"base verified in {time.time() - t0:.1f}s: {n_shards} shards, {len(truth)} text tensors")

    t0 = time.time()
    del truth
    tm.to(torch.float32)
    gen = torch.Generator().manual_seed(FX["seed"] + 1)
    mfa.make_adapter(FX, tm, kev_dir, gen)
    shapes = {n: torch.empty(s, device="meta") for n, s in mfa.expected_shapes(FX, VOCAB_SIZE).items()}
    n_adapter = mf.verify_adapter(FX, kev_dir, shapes)
    log(f"adapter written and verified in {time.time() - t0:.1f}s: {n_adapter} tensors")
    head = mf.make_head(FX, gen)
    mf.save_head(FX, head, kev_dir / "head.pt", "lora", FX["lora"]["r"])
    back = torch.load(str(kev_dir / "head.pt"), map_location="cpu", weights_only=True)
    expect(back["base"] == FX["base_id"] and back["head_dim"] == FX["head_dim"], "head.pt base / head_dim")
    log("head.pt written and verified")
    del model, tm
    torch.cuda.empty_cache()

    rows = mf.file_table(root)
    total = sum(size for _, size, _ in rows)
    print("\n" + "=" * 100)
    print(f"{FX['name']}: {total / 1e9:.2f} GB in {len(rows)} files, {time.time() - t_start:.1f}s in all")
    for path, size, extra in rows:
        print(f"  {path:44s} {size:>14,d}  {extra}")
    if mf.NOTES:
        print("\nNOTES")
        for n in mf.NOTES:
            print(f"  - {n}")


if __name__ == "__main__":
    main()
