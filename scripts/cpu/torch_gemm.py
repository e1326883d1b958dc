#!/usr/bin/env python3
"""PyTorch's CPU GEMMs (oneDNN/MKL) at the shapes of tensor/cpu's BenchmarkGEMM, for the parallel speed-up beside
kev's: y = x·wᵀ (torch.nn.functional.linear) for x [M, K], w [N, K], at each thread count, median of --runs after
--warmup. One JSON object a line: {"dtype", "threads", "n", "k", "m", "ms", "gflops"}.

  python3 scripts/cpu/torch_gemm.py --threads 1,4,16 --dtypes fp32,bf16
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = [(8192, 1024), (1024, 2048), (7168, 1024), (1024, 3584)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--ms", default="240,2392")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    for dt in a.dtypes.split(","):
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dt]
        for t in [int(v) for v in a.threads.split(",")]:
            torch.set_num_threads(t)
            for n, k in SHAPES:
                w = torch.randn(n, k).to(dtype)
                for m in [int(v) for v in a.ms.split(",")]:
                    x = torch.randn(m, k).to(dtype)
                    with torch.inference_mode():
                        for _ in range(a.warmup):
                            F.linear(x, w)
                        ts = []
                        for _ in range(a.runs):
                            t0 = time.perf_counter()
                            F.linear(x, w)
                            ts.append(time.perf_counter() - t0)
                    ms = statistics.median(ts) * 1e3
                    print(json.dumps({"dtype": dt, "threads": t, "n": n, "k": k, "m": m, "ms": round(ms, 3),
                                      "gflops": round(2 * m * n * k / ms / 1e6, 1)}), flush=True)


if __name__ == "__main__":
    main()
