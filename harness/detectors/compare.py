"""Two runs' outputs compared through the spec's canonical view (the detectors' shared check)."""

from __future__ import annotations

import torch


def outputs_agree(spec, a: dict, b: dict, bitwise: bool) -> list[str]:
    """Problems found comparing two runs' outputs (through the spec's canonical view): bitwise,
    or within the op tolerance (integer outputs, such as top-k indices, always exactly)."""
    bad = []
    for name in spec.outputs:
        x, y = spec.canonical(name, a[name]), spec.canonical(name, b[name])
        if bitwise or not x.is_floating_point():
            if not torch.equal(x, y):
                diff = (x.double() - y.double()).abs().max().item() if x.shape == y.shape else None
                bad.append(f"{name} not bitwise equal (max diff {diff})")
        else:
            tol = spec.tolerance(name)
            try:
                torch.testing.assert_close(x.double(), y.double(), atol=tol.atol, rtol=tol.rtol,
                                           equal_nan=False)
            except AssertionError as exc:
                bad.append(f"{name}: {str(exc).splitlines()[0]}")
    return bad
