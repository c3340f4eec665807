"""What a detector is, as an object a seeded fault points at (``kernels/<family>/faults.py``):
its name and the bug class it catches. The engine's detectors (``harness/detectors/``) run the
built-in ones; a family's probes (:class:`harness.core.family.Probe`) are detectors of its own."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Detector:
    name: str
    catches: str


PRECISION_GROWTH = Detector("precision_growth", "error that grows with the token count")
BATCH_INVARIANCE = Detector("batch_invariance", "a token's result depending on the batch around it")
POISONED_OUTPUTS = Detector("poisoned_outputs", "outputs left unwritten (they keep a poison value)")
CONFIG_INVARIANCE = Detector("config_invariance", "results depending on a launch configuration")
INPUTS_UNCHANGED = Detector("inputs_unchanged", "inputs or the guard rows past them written to")
DETERMINISM = Detector("determinism", "runs on the same inputs that differ (a race)")
DISPATCH_THRESHOLDS = Detector("dispatch_thresholds", "wrong results past a dispatch threshold")
CUDA_GRAPH = Detector("cuda_graph", "capture failures and stale values in CUDA-graph replays")
LAYOUTS = Detector("layouts", "wrong results on, or writes outside, strided, sliced, transposed or "
                   "misaligned input views")
CALL_SEQUENCE = Detector("call_sequence", "state kept from one call to the next (plans, caches, "
                         "first-call values, dirty outputs) in runs of eager calls")

BUILT_IN = (PRECISION_GROWTH, BATCH_INVARIANCE, POISONED_OUTPUTS, CONFIG_INVARIANCE,
            INPUTS_UNCHANGED, DETERMINISM, DISPATCH_THRESHOLDS, CUDA_GRAPH, LAYOUTS, CALL_SEQUENCE)
