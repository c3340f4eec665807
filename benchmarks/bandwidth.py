"""Measured device-to-device copy bandwidth (counting bytes read and written), the roofline the
memory-bound kernels are judged against.

    python benchmarks/bandwidth.py
"""

from common import copy_bandwidth, need_gpu

if __name__ == "__main__":
    need_gpu("bandwidth")
    print(f"device copy of 1 GiB: {copy_bandwidth():.0f} GB/s (read + write)")
