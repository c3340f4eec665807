"""Measured device-to-device copy bandwidth (counting bytes read and written), the roofline the
memory-bound kernels are judged against."""

import torch
import triton.testing


def main(gib: float = 1.0) -> float:
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=5, rep=50)
    gbs = 2 * n / ms / 1e6
    print(f"device copy of {gib:g} GiB: {ms:.3f} ms, {gbs:.0f} GB/s (read + write)")
    return gbs


if __name__ == "__main__":
    main()
