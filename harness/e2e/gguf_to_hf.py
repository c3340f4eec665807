"""``python gguf_to_hf.py GGUF OUT [--dtype bfloat16]``: a GGUF model as a plain Hugging Face
folder (config, tokenizer, safetensors) that ``vllm serve`` loads, dequantised with transformers
and ``gguf``, offline. Runs in the vLLM server's own environment (harness.e2e.vllm_cpu), so it
imports nothing from the harness.

transformers loads the GGUF as a quantised model (``GgufConfig(dequantize=True)``), which
``save_pretrained`` refuses to write; its weights are copied into a plain model of the same
config first. The folder is written beside OUT and renamed at the end, so a half-written one is
never used.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys


def convert(gguf: pathlib.Path, out: pathlib.Path, dtype: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GgufConfig

    torch_dtype = getattr(torch, dtype)
    kwargs = {"gguf_file": gguf.name}
    quantised = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), **kwargs, dtype=torch_dtype,
        quantization_config=GgufConfig(str(gguf), dequantize=True))
    config = AutoConfig.from_pretrained(str(gguf.parent), **kwargs)
    config.dtype = torch_dtype
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = plain.load_state_dict(
        {k: v.to(torch_dtype) for k, v in quantised.state_dict().items()}, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        sys.exit(f"gguf_to_hf: weights do not match the config: missing {missing[:5]}, "
                 f"unexpected {unexpected[:5]}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs).save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    convert(args.gguf.resolve(), args.out, args.dtype)
    print(f"gguf_to_hf: wrote {args.out}")


if __name__ == "__main__":
    main()
