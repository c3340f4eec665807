"""Programmatic dependent launch (``kernels.runtime.triton_utils.dependent_launch``) lets a kernel's
programs start while the kernel before it still runs; they must wait before reading anything,
or they read values not yet written. Back-to-back calls captured in a CUDA graph, each reading
the previous call's output (where the overlap happens), must give the bits of the same calls
launched one after another without PDL."""

import pytest

CALLS = 6


@pytest.mark.parametrize("hip, capability, interpreted, want", [
    (None, (9, 0), False, True),     # Hopper, compiled
    (None, (10, 0), False, True),    # Blackwell
    (None, (8, 0), False, False),    # Ampere: no griddepcontrol
    ("6.4", (9, 4), False, False),   # ROCm (MI300's gfx942 reads as 9.4): Triton's AMD backend has no launch_pdl
    (None, (9, 0), True, False),     # the interpreter
], ids=["sm90", "sm100", "sm80", "rocm", "interpreter"])
def test_dependent_launches_are_asked_for_only_where_they_exist(hip, capability, interpreted, want,
                                                                monkeypatch):
    """``launch_pdl`` is an option of Triton's NVIDIA backend only: passed on AMD, every mHC
    launch would fail ("Keyword argument launch_pdl was specified but unrecognised")."""
    import torch

    from kernels.runtime import device as core_device
    from kernels.runtime import triton_utils

    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(core_device, "triton_interpreted", lambda: interpreted)
    triton_utils.dependent_launch.cache_clear()
    try:
        got = triton_utils.dependent_launch(torch.device("cuda", 0), True)
    finally:
        triton_utils.dependent_launch.cache_clear()
    want = want and triton_utils.gdc_wait is not None
    assert got["PDL"] is want and ("launch_pdl" in got) is want
    assert got["NEXT_EARLY"] is want
    cpu = triton_utils.dependent_launch(torch.device("cpu"))
    triton_utils.dependent_launch.cache_clear()
    assert cpu == {"PDL": False, "NEXT_EARLY": False}


@pytest.mark.gpu
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("tokens, early", [(1, True), (64, True), (32, False), (256, False)],
                         ids=["T1-next-released-early", "T64-next-released-early",
                              "T32-next-released-late", "T256-next-released-late"])
def test_chained_calls_under_pdl_give_the_bits_of_plain_launches(tokens, early, monkeypatch):
    import torch

    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec
    from harness.detectors.cuda_graph import capture
    from kernels.mhc import triton as mhc_triton

    op = "mhc_fused_post_pre"
    assert mhc_triton._next_early(tokens, head=False) is early, (
        f"mhc_pre no longer releases the next kernel {'early' if early else 'late'} at T={tokens}: "
        "pick this case's T from kernels.mhc.triton._next_early again")
    spec, fn = get_spec(op), records(op)["triton"].fn
    inputs = spec.make_inputs(Case(op, tokens=tokens, hidden=7168, device="cuda", seed=3))
    args = list(spec.arguments(inputs))
    if not mhc_triton.dependent_launch(torch.device("cuda"))["PDL"]:
        pytest.skip("PDL is off on this GPU (before SM90, or not NVIDIA): nothing overlaps")

    def chain():
        outputs, call = [], list(args)
        for _ in range(CALLS):
            out = fn(*call)
            outputs.extend(out)
            call[1] = out[0]  # the next call's residual is this one's new residual
        return outputs

    chain()  # compiles the PDL launches outside the capture
    graph = torch.cuda.CUDAGraph()
    overlapped = capture(graph, chain)
    graph.replay()
    torch.cuda.synchronize()
    overlapped = [t.clone() for t in overlapped]

    try:
        with monkeypatch.context() as m:
            m.setattr(mhc_triton, "dependent_launch",
                      lambda device, next_early=False: {"PDL": False, "NEXT_EARLY": False})
            mhc_triton.clear_launch_caches()
            plain = chain()
            torch.cuda.synchronize()
    finally:
        mhc_triton.clear_launch_caches()  # later tests get PDL launches again
    for i, (want, got) in enumerate(zip(plain, overlapped)):
        differ = int((want.view(torch.uint8) != got.view(torch.uint8)).sum())
        assert differ == 0, (f"call {i // 4}, output {i % 4}: {differ} bytes differ between "
                             "PDL launches in a graph and plain launches")
