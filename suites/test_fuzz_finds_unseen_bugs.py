"""``harness fuzz``: cases drawn from each op's declared space find the bugs no grid point holds,
each failure shrinks to a minimal case saved for replay, and the same seed draws the same cases.

Runs a short deterministic budget (fixed seed, no example database, an example count instead of
a time budget): the seeded faults below must be found and shrunk, the shipped torch paths must
pass. The nightly runs the time-budgeted search (``harness fuzz --fuzz-minutes``) on a GPU.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

from harness import families
from harness.cli import main as harness_main
from harness.core.input_space import case_values
from harness.core.specs import all_specs, get_spec
from harness.fuzz import implementation_targets
from harness.fuzz.describe import describe
from harness.fuzz.search import search
from harness.fuzz.strategies import cases
from harness.profiles import BASELINE_MAX_TOKENS
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE

pytestmark = pytest.mark.machinery


FIND = settings(database=None, derandomize=True, max_examples=20_000,
                suppress_health_check=list(HealthCheck), phases=(Phase.generate,))
"""Reaching a cell needs one drawn case in it, not the smallest one: no shrinking. One search
draws until every cell has a case (what the rarest cell costs), not one search per cell."""


def _fault(name: str):
    return next(f for f in families.all_faults() if f.name == name)


def _values(spec, case) -> dict:
    return case_values(spec.case_params, case.tokens, case.hidden, dict(case.params))


@pytest.mark.parametrize("op", sorted(all_specs()))
def test_fuzz_space_reaches_every_declared_cell(op):
    """Every cell of the op's input space is drawable: the fuzz space spans the grid's cells
    (sizes unbounded here; a run caps them by device)."""
    spec = get_spec(op)
    assert spec.fuzz_space is not None, f"{op} declares no fuzz space"
    cells = spec.input_space.cells
    reached: set[str] = set()

    def every_cell_reached(case) -> bool:
        values = _values(spec, case)
        reached.update(c.name for c in cells if c.name not in reached and c.matches(values))
        return len(reached) == len(cells)

    try:
        find(cases(spec, "cuda", max_elements=2 ** 40), every_cell_reached, settings=FIND)
    except NoSuchExample:
        pass
    missing = [c.name for c in cells if c.name not in reached]
    assert not missing, (f"{op}: no case of {FIND.max_examples} drawn reaches "
                         f"{', '.join(missing)}")


CPU_FAULTS = {
    "global_offsets": "row_starts",
    "stale_instead_of_minus_one": "-1]",
    "decode_window_off_by_one": ("next_n 2", "next_n 3"),
    "empty_context_sees_first_key": ("empty_requests 1", "(short contexts)"),
    "window_end_inclusive": "logits",
    "hidden_tail_unwritten_past_2048": "H 2",
    "nan_ranks_highest": "nan",
}
"""Faults found within a short deterministic budget on a CPU, and what their smallest shrunk case
names (or the names it may take: an empty context is also reached by a drawn call sequence whose
short step has one, shrunk to T 1; a decode window off by one needs next_n above 1, and a call
sequence's steps may keep it at 3)."""


@pytest.mark.parametrize("name", sorted(CPU_FAULTS))
def test_seeded_fault_is_found_and_shrunk(name):
    fault = _fault(name)
    spec = get_spec(fault.op)
    result = search(spec, fault.build(BASELINE_MAX_TOKENS), device="cpu", seconds=600,
                    max_examples=300, seed=0, max_elements=2 ** 16, stop_at_first=True)
    assert result.found, f"{name}: not found in {result.examples} drawn cases"
    expected = CPU_FAULTS[name]
    names = (expected,) if isinstance(expected, str) else expected
    texts = [(describe(spec, f.failure), f) for f in result.found.values()]
    named = [(text, f) for text, f in texts if any(e in text for e in names)]
    assert named, "\n".join(text for text, _ in texts)
    assert any(f.failure.case.tokens <= 64 or f.shrinks for _, f in named), \
        f"{name}: not shrunk from {named[0][0]}"


def test_same_seed_draws_the_same_cases():
    spec = get_spec("top_k_per_row_decode")
    impl = next(t.impl for t in implementation_targets(["top_k_per_row_decode"], ["torch"])[0])
    runs = [search(spec, impl, device="cpu", seconds=600, max_examples=12, seed=7,
                   max_elements=2 ** 16).drawn for _ in range(2)]
    other = search(spec, impl, device="cpu", seconds=600, max_examples=12, seed=8,
                   max_elements=2 ** 16).drawn
    assert runs[0] == runs[1] and len(runs[0]) == 12
    assert other != runs[0]


def test_shipped_paths_pass_a_short_fuzz():
    """Every implementation the harness ships without Triton kernels (the torch paths), on the
    CPU: a few drawn cases each, all passing. (On a GPU host the Triton ones are targets too, and
    cannot take CPU tensors: they are fuzzed on the GPU by `harness fuzz`. Vendors' entries are
    fuzzed with `harness fuzz --impl NAME`; what that finds is in docs/vendors.md.)"""
    targets = [t for t in implementation_targets(None, None)[0]
               if not t.impl.triton and t.impl.origin == "shipped"]
    assert targets, "no implementation to fuzz here"
    for t in targets:
        result = search(t.spec, t.impl, device="cpu", seconds=600, max_examples=6, seed=0,
                        max_elements=2 ** 15)
        assert result.examples, f"{t.spec.op}/{t.impl.name}: every draw discarded {result.discarded}"
        assert not result.found, "; ".join(describe(t.spec, f.failure)
                                           for f in result.found.values())


def test_cli_verdicts_and_replay(tmp_path, capsys):
    out = tmp_path / "faults"
    code = harness_main(["fuzz", "--faults", "stale_instead_of_minus_one", "--database", "none",
                         "--examples", "200", "--device", "cpu", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == EXIT_GOOD, text
    assert "found and shrank all 1" in text and "top_k_per_row_decode, T 1," in text
    assert json.loads((out / "fuzz.json").read_text())["failures"][0]["minimal"]


def test_user_module_failure_is_reported_with_its_replay(tmp_path, capsys):
    module = tmp_path / "my_topk.py"
    module.write_text(
        "import torch\n"
        "from harness import register\n"
        "from kernels.topk import torch as ref\n"
        "@register('top_k_per_row_decode', 'my-topk')\n"
        "def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):\n"
        "    ref.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0,\n"
        "                             stride1, top_k)\n"
        "    if num_rows > 3:\n"
        "        indices[3, 0] = 0 if int(indices[3, 0]) != 0 else 1\n")
    out = tmp_path / "run"
    code = harness_main(["fuzz", "--op", "top_k_per_row_decode", "--impl", "my-topk",
                         "--impl-module", str(module), "--database", "none", "--examples", "60",
                         "--max-elements", str(2 ** 15), "--device", "cpu", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == EXIT_BAD, text
    assert "Fuzz verdict: FAIL" in text and "T 4" in text and "harness replay" in text
    junit = (out / "junit.xml").read_text()
    assert 'name="my-topk"' in junit and "<failure" in junit and "harness replay" in junit
    saved = sorted((out / "cases").glob("*.pt"))
    assert harness_main(["replay", str(saved[0]), "--impl-module", str(module),
                         "--device", "cpu"]) == EXIT_BAD


def test_unknown_fault_or_implementation_could_not_test(capsys):
    assert harness_main(["fuzz", "--faults", "no_such_fault", "--device", "cpu",
                         "--database", "none"]) == EXIT_UNTESTABLE
    assert harness_main(["fuzz", "--op", "mhc_post", "--impl", "nobody", "--device", "cpu",
                         "--database", "none"]) == EXIT_UNTESTABLE
    assert "no implementation named nobody" in capsys.readouterr().err


def test_a_harness_error_is_could_not_test_not_a_pass(monkeypatch):
    """An error of the harness itself (here: its input generator) ends the search with the error
    and makes the verdict "could not test", never a quiet pass over the cases before it."""
    from harness.fuzz import report

    spec = get_spec("mhc_post")
    impl = next(t.impl for t in implementation_targets(["mhc_post"], ["torch"])[0])

    def broken(case):
        raise RuntimeError("generator bug")

    monkeypatch.setattr(spec, "_make_inputs", broken)
    result = search(spec, impl, device="cpu", seconds=600, max_examples=20, seed=0,
                    max_elements=2 ** 14)
    assert result.error and "generator bug" in result.error
    code, why = report.verdict([result], [], self_check=False)
    assert code == EXIT_UNTESTABLE and "harness itself failed" in why
