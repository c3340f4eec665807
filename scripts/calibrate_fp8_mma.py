"""Measure the logits error of every implementation that declares fp8 tensor-core accumulation
(``fp8-mma``), and of the seeded bf16-intermediate faults, in units u = 2^-24 of each logit's
bound (``sum_h |w| sum_d |q k| k_scale``): the figures ``FP8_MMA_U`` in
``kernels/sparse_indexer/compare.py`` is set from (at most ~3x the worst real kernel, below the
best fault). A table on stdout; ``--json FILE`` for the rows.

    python scripts/calibrate_fp8_mma.py [--seeds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))

from harness.core.device import configure_triton, default_device  # noqa: E402

configure_triton()  # before any Triton kernel is defined: the interpreter on a CPU
from harness import families  # noqa: E402
from harness.core.cases import Case  # noqa: E402
from harness.core.registry import records  # noqa: E402
from harness.core.specs import get_spec  # noqa: E402
from kernels.sparse_indexer.compare import U32  # noqa: E402

SHAPES = {
    "fp8_mqa_logits": [dict(tokens=257, heads=64, seqs=3, context=2048),
                       dict(tokens=2048, heads=64, seqs=7, context=8192),
                       dict(tokens=4096, heads=64, seqs=1, context=0),
                       dict(tokens=65, heads=8, seqs=2, context=256),
                       dict(tokens=257, heads=4, seqs=3, context=2048)],
    "fp8_paged_mqa_logits": [dict(batch=16, next_n=1, context=8192, heads=64),
                             dict(batch=64, next_n=2, context=8192, heads=64),
                             dict(batch=4, next_n=4, context=65536, heads=64),
                             dict(batch=16, next_n=2, context=4096, heads=8)],
}
SMALL = {"fp8_mqa_logits": [dict(tokens=33, heads=8, seqs=3, context=200)],
         "fp8_paged_mqa_logits": [dict(batch=3, next_n=2, context=300, heads=8)]}


def error_u(out: torch.Tensor, ref: dict, heads: int) -> dict[str, float]:
    """Worst, 99th-percentile and mean error of the visible logits, in u of their bound, scaled
    to 64 heads (x sqrt(heads / 64): see FP8_MMA_U)."""
    visible = ~torch.isneginf(ref["logits"]) & torch.isfinite(out)
    err = (out[visible].double() - ref["logits"][visible]).abs()
    share = err / ref["bound"][visible].clamp_min(1e-300) / U32 * (heads / 64) ** 0.5
    if not share.numel():
        return {"worst_u": 0.0, "p99_u": 0.0, "mean_u": 0.0}
    sample = share if share.numel() <= 1 << 24 else share[torch.randperm(
        share.numel(), device=share.device)[:1 << 24]]
    return {"worst_u": float(share.max()), "p99_u": float(torch.quantile(sample.float(), 0.99)),
            "mean_u": float(share.mean())}


def measure(seeds: int, device: str) -> pd.DataFrame:
    from kernels.sparse_indexer import faults

    fault_impls = [f.build(64) for f in faults.FAULTS if f.name.startswith("bf16_")]
    shapes = SHAPES if device.startswith("cuda") else SMALL
    rows = []
    for op, params in shapes.items():
        spec = get_spec(op)
        impls = [i for i in records(op).values() if i.available and i.accumulation == "fp8-mma"]
        impls += [f for f in fault_impls if f.op == op]
        for p in params:
            for seed in range(seeds):
                tokens = p.get("tokens") or p["batch"] * p["next_n"]
                case = Case(op, tokens=tokens, seed=seed, device=device,
                            params=tuple((k, v) for k, v in p.items() if k != "tokens"))
                inputs = spec.make_inputs(case)
                ref = spec.reference(inputs)
                for impl in impls:
                    plans = impl.knobs.get("plan", (None,))
                    for n, plan in enumerate(plans):
                        knobs = {"plan": plan} if plan is not None else {}
                        out = spec.run(impl.fn, inputs, **knobs)["logits"]
                        rows.append({"op": op, "impl": impl.name, "case": case.id,
                                     "plan": n, "seed": seed, **error_u(out, ref, p["heads"]),
                                     "kind": "fault" if impl.name.startswith("fault-") else
                                     "kernel"})
                del inputs, ref
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    families.load()
    device = default_device()
    df = measure(args.seeds, device)
    summary = df.groupby(["kind", "op", "impl"])[["worst_u", "p99_u", "mean_u"]].agg(["min", "max"])
    print(f"device: {torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}")
    print(summary.to_string())
    kernels, faults = df[df.kind == "kernel"], df[df.kind == "fault"]
    if not kernels.empty and not faults.empty:
        for stat in ("worst_u", "p99_u", "mean_u"):
            print(f"{stat}: worst kernel {kernels[stat].max():.0f} u; smallest fault "
                  f"{faults[stat].min():.0f} u; separation "
                  f"{faults[stat].min() / max(kernels[stat].max(), 1e-9):.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(json.loads(df.to_json(orient="records")), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
