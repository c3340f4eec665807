"""Op specs: for each op, one object that makes inputs for a case, computes the float64 ground
truth, names the outputs and compares an implementation's outputs with the right tolerances.

Specs register themselves by op name (``register_spec``); suites and detectors look them up with
``get_spec``, so adding an op family never touches the engine.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Mapping, Sequence

import torch

from harness.core import call_sequences, layouts, metrics
from kernels.runtime import deferred
from harness.core.cases import Case
from harness.core.errors import ContractViolation
from harness.core.fuzz_space import FuzzSpace
from harness.core.input_space import CASE_FIELDS, InputSpace
from harness.core.ops import check_op
from harness.core.registries import Registry
from harness.core.registry import Implementation, ensure_loaded
from harness.core.tolerances import Tolerance, ToleranceTable


def contract(*required: str, **optional: Any) -> inspect.Signature:
    """An op's signature as the contract states it: the ``required`` arguments in order, then
    the ``optional`` ones with their defaults."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(n, kind) for n in required]
                             + [inspect.Parameter(n, kind, default=d) for n, d in optional.items()])


class OpSpec:
    """Base class. Subclasses set ``op``, ``signature``, ``outputs``, ``output_dtypes``,
    ``token_args`` and implement ``make_inputs`` and ``_reference``.

    Every input in ``token_args`` has tokens on dim 0, and so does every output: that is what lets
    the engine slice a batch and embed tokens into other batches generically.
    """
    op: str = ""
    signature: inspect.Signature = inspect.Signature()
    """The op's arguments (../shared/spec/ops.md). Inputs are dicts keyed by these names and are
    bound to them by name, whatever the dict's order; a split-K knob the contract names
    (``n_splits``) is an optional parameter."""
    outputs: tuple[str, ...] = ()
    output_dtypes: dict[str, torch.dtype] = {}
    token_args: tuple[str, ...] = ()
    reference_extras: tuple[str, ...] = ()
    """What ``reference`` returns beside the outputs' truth, for ``compare`` (e.g. the logits'
    float64 error bound)."""
    reference_chunk: int = 4096
    tolerances: ToleranceTable = ToleranceTable()
    guard_inputs: bool = False
    """Pass the ``token_args`` as views of buffers with guard rows after them, and fail a call
    that changes the guard rows (a tail tile written past the end of a buffer it was given)."""
    written_args: tuple[str, ...] = ()
    """Inputs the op writes in place (``prepare`` gives every call a fresh copy): layouts leave
    them as made (harness.core.layouts)."""
    contiguous_args: tuple[str, ...] = ()
    """Inputs the contract itself requires packed, for every implementation (the paged K cache,
    a block-major byte layout every backend views whole): layouts leave them as made."""
    layout_probe: tuple[int, tuple[tuple[str, Any], ...]] = (3, ())
    """(tokens, case params) of the small case the layouts detector runs in every layout."""
    replay_params: tuple[tuple[str, Any], ...] = ()
    """Case params under which every seed of a case has the same input shapes, as a captured
    CUDA graph's buffers do (e.g. a paged cache sized for the maximum length): the CUDA-graph
    detector adds them to its case unless the case sets them."""

    case_params: Mapping[str, Any] = {}
    """The named parameters a case of this op may carry, with their defaults; the spec's
    docstring says what each means. A case with any other name is refused (a sweep axis with a
    typo would otherwise run the default and pass)."""
    input_space: InputSpace = InputSpace()
    """The value distributions, sizes and metadata this op is judged on, as named cells
    (harness.core.input_space); the report's coverage table counts the judged cases of each."""
    fuzz_space: FuzzSpace | None = None
    """What ``harness fuzz`` may draw for this op (harness.core.fuzz_space); None: not fuzzed."""
    call_orders: tuple[str, ...] = ()
    """The orders of context lengths its call sequences take (harness.core.call_sequences:
    ``short-first``, ``long-first``); none for ops whose calls carry no lengths."""

    small_params: tuple[tuple[str, Any], ...] = ()
    """Case parameters that make a case of this op small where its defaults are production
    sizes (a self-test's call sequences, run through every implementation on the CPU)."""

    def small_case(self, case: Case) -> Case:
        """``case`` with ``small_params`` where it sets none of its own."""
        return dataclasses.replace(case, params=tuple({**dict(self.small_params),
                                                       **dict(case.params)}.items()))

    def call_step(self, case: Case, step: "call_sequences.Step") -> Case:
        """The case of call ``step`` of a run starting at ``case`` (harness.core.call_sequences):
        the same shapes with new values and metadata. Default: the next seed. Ops with lengths
        or padding override it with their own parameters (``step.lengths``, ``step.padded``)."""
        return dataclasses.replace(case, seed=case.seed + step.index)

    def written_in_place(self, inputs: dict[str, Any]) -> tuple[str, ...]:
        """The arguments the op writes in place: those ``prepare`` gives fresh copies of."""
        call = self.prepare(inputs)
        return tuple(name for name, value in call.items() if value is not inputs.get(name))

    def make_inputs(self, case: Case) -> dict[str, Any]:
        """The inputs of ``case``, by argument name."""
        self.check_case(case)
        return self._make_inputs(case)

    def _make_inputs(self, case: Case) -> dict[str, Any]:
        raise NotImplementedError

    def check_case(self, case: Case) -> None:
        """Refuse a case of another op, or one with a parameter this spec does not declare."""
        if case.op != self.op:
            raise ValueError(f"{case.id}: a case of {case.op} given to the spec of {self.op}")
        unknown = [name for name, _ in case.params if name not in self.case_params]
        if unknown:
            raise ValueError(f"{case.id}: {self.op} takes no case parameter {', '.join(unknown)}; "
                             f"it takes {', '.join(self.case_params) or 'none'} "
                             f"({type(self).__module__}.{type(self).__name__}.case_params)")

    def check_reference(self, ref: dict[str, Any]) -> None:
        """Refuse a reference with a key that is neither an output nor a declared extra (a
        stale saved case, or a spec passing context through the truth)."""
        missing = [name for name in self.outputs if name not in ref]
        unknown = [k for k in ref if k not in self.outputs and k not in self.reference_extras]
        if missing or unknown:
            raise ValueError(f"the reference of {self.op} lacks {missing} or has undeclared "
                             f"{unknown}; outputs {self.outputs}, extras {self.reference_extras}")

    def param(self, case: Case, name: str) -> Any:
        """The case's value of a declared parameter, else its default."""
        if name not in self.case_params:
            raise KeyError(f"{self.op} declares no case parameter {name!r}; add it to "
                           f"{type(self).__name__}.case_params with its default")
        return case.param(name, self.case_params[name])

    def _reference(self, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def token_count(self, inputs: dict[str, Any]) -> int:
        return int(inputs[self.token_args[0]].shape[0])

    def case_elements(self, case: Case) -> int | None:
        """Rows x width of the tensors ``case`` makes, which sizes its memory; None when the
        test chooses the rows. Default: tokens x hidden."""
        return case.tokens * max(case.hidden, 1) if case.tokens else None

    def take_tokens(self, inputs: dict[str, Any], index: torch.Tensor | Sequence[int]) -> dict:
        """The same op call restricted to the tokens ``index`` (in that order)."""
        idx = torch.as_tensor(index, dtype=torch.long)
        return {k: (v[idx.to(v.device)] if k in self.token_args else v) for k, v in inputs.items()}

    def name_outputs(self, result: Any) -> dict[str, torch.Tensor]:
        if isinstance(result, torch.Tensor):
            result = (result,)
        result = tuple(result)
        if len(result) != len(self.outputs):
            raise ContractViolation(
                f"{self.op} must return {len(self.outputs)} outputs {self.outputs}, got "
                f"{len(result)}")
        return dict(zip(self.outputs, result))

    def arguments(self, inputs: dict[str, Any]) -> tuple:
        """``inputs`` bound to the signature by name, as the positional arguments in contract
        order (how vLLM calls these ops); a missing or unknown name is an error naming it."""
        try:
            return self.signature.bind(**inputs).args
        except TypeError as exc:
            raise TypeError(f"{self.op}{self.signature} cannot take the inputs "
                            f"{sorted(inputs)}: {exc}. Name every argument as the contract "
                            "does (../shared/spec/ops.md)") from None

    def after_layout(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Hook after a layout made views of the inputs: restate what describes them (e.g.
        top-k's ``stride0``/``stride1``). Default: as laid out."""
        return inputs

    def own_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The entries of ``inputs`` this op takes (e.g. mhc_post's out of a fused op's)."""
        return {name: inputs[name] for name in self.signature.parameters if name in inputs}

    def call(self, fn: Callable, inputs: dict[str, Any], **knobs: Any) -> Any:
        """``fn`` called on ``inputs`` bound by name; ``knobs`` go as keywords. Errors that the
        kernels found on the device are raised here, from this call (``deferred``)."""
        result = fn(*self.arguments(inputs), **knobs)
        deferred.raise_pending()
        return result

    def run(self, fn: Callable, inputs: dict[str, Any], **knobs: Any) -> dict[str, torch.Tensor]:
        """Call ``fn`` on fresh copies of its in-place buffers and name its outputs."""
        call = self.prepare(inputs)
        return self.collect(call, self.launch(fn, call, **knobs))

    def prepare(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The arguments of one call: ``inputs``, with fresh copies of any buffer the op writes
        in place (so every call starts from the same bytes)."""
        return dict(inputs)

    def launch(self, fn: Callable, call: dict[str, Any], **knobs: Any) -> Any:
        """The call and nothing else: what a CUDA graph captures (no host work of the
        harness's own in between)."""
        return self.call(fn, call, **knobs)

    def collect(self, call: dict[str, Any], result: Any) -> dict[str, torch.Tensor]:
        """The named outputs of a finished call (may read back to the host), after the errors
        its kernels flagged on the device (a replayed CUDA graph's included)."""
        deferred.raise_pending()
        return self.name_outputs(result)

    def reference(self, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Ground truth, computed in float64 in token chunks so 131072-token cases fit in memory,
        and stored as ``stored_truth`` says."""
        tokens = self.token_count(inputs)
        return self.chunked_truth(tokens, lambda s, e: self._reference(
            inputs if e - s == tokens else self.take_tokens(inputs, range(s, e))))

    def chunked_truth(self, tokens: int, compute: Callable[[int, int], dict],
                      names: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """``compute(start, end)`` over chunks of ``reference_chunk`` tokens, each output written
        into one preallocated tensor (no list of parts plus their concatenation: that doubles the
        peak, 30 GiB for the fused op at 65536 x 7168)."""
        names = tuple(names or self.outputs)
        step = self.reference_chunk
        if tokens <= step:
            whole = compute(0, tokens)
            return {k: self.stored_truth(k, v) if k in names else v for k, v in whole.items()}
        out: dict[str, torch.Tensor] = {}
        for start in range(0, tokens, step):
            part = compute(start, min(start + step, tokens))
            for k in names:
                value = self.stored_truth(k, part[k])
                if k not in out:
                    out[k] = value.new_empty((tokens, *value.shape[1:]))
                out[k][start:start + value.shape[0]] = value
        return out

    def stored_truth(self, output: str, value: torch.Tensor) -> torch.Tensor:
        """The float64 truth of a 16-bit output is kept in float32: rounding it there moves it by
        at most 2^-24 relative, 1/65536 of a bfloat16 ulp, far below any tolerance or growth
        statistic of such an output, and halves the largest tensors of a 65536-token case.
        Outputs declared float32 or wider keep float64."""
        declared = self.output_dtypes.get(output)
        if (declared in (torch.bfloat16, torch.float16) and value.dtype == torch.float64):
            return value.float()
        return value

    def refine_reference(self, inputs: dict[str, Any], outputs: dict[str, torch.Tensor],
                         ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook for ops whose later outputs are defined on an earlier output the implementation
        stores (e.g. the fused op's pre half reads the bf16 residual it wrote). Default: ``ref``."""
        return ref

    def canonical(self, output: str, value: torch.Tensor) -> torch.Tensor:
        """``value`` in the form two runs must agree on bitwise; override where the contract
        leaves an order free. Default: as returned."""
        return value

    def unwritten(self, c: "Comparison") -> dict[str, torch.Tensor]:
        """Output name -> mask of the elements the implementation declares it leaves unwritten
        (their bytes are whatever the buffer held, so two runs need not agree on them). Default:
        none."""
        return {}

    def bitwise_outputs(self, c: "Comparison", unwritten: dict) -> tuple[str, ...]:
        """The outputs two calls of ``c.impl`` (a graph replay and an eager call) must agree on
        bitwise, over their written cells (``unwritten``: from :meth:`unwritten`). Default: all;
        a spec leaves out an output whose unwritten cells it cannot locate."""
        return self.outputs

    def tolerance(self, output: str, accumulation: str | None = None) -> Tolerance:
        return self.tolerances.tolerance(self.op, output, self.output_dtypes[output], accumulation)

    def noise_floor(self, output: str) -> float:
        return self.tolerances.noise_floor(output, self.output_dtypes[output])

    def compare(self, c: "Comparison") -> list[dict]:
        """One row per output (``output``, ``passed``, ``detail`` and its metrics). Default: each
        output against its truth within the tolerance of the implementation's declared
        accumulation class."""
        rows = []
        for name in self.outputs:
            tol = self.tolerance(name, c.accumulation)
            row = metrics.compare(c.outputs[name], c.expected[name], tol, self.output_dtypes[name])
            rows.append({"output": name, **row})
        return rows

    def extra_checks(self, call: dict[str, Any]) -> list[dict]:
        """Rows of checks on the call's own buffers after it ran, beside the outputs (e.g. the
        guard band around an index buffer the op writes into). Default: none."""
        return []


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Everything one comparison may judge by: the call's inputs, the implementation's outputs,
    the expected values (the reference's outputs and the ``reference_extras`` of its spec), and
    the implementation with its declared properties."""
    inputs: dict[str, Any]
    outputs: dict[str, torch.Tensor]
    expected: dict[str, Any]
    impl: Implementation | None = None
    """The implementation judged; None judges by the defaults."""

    @property
    def accumulation(self) -> str:
        return getattr(self.impl, "accumulation", "fp32")

    def declared(self, key: str, default: str) -> str:
        return dict(getattr(self.impl, "declared", {}) or {}).get(key, default)


_SPECS: Registry[OpSpec] = Registry("spec")


def register_spec(spec: OpSpec) -> OpSpec:
    check_op(spec.op)
    layouts.with_layout_axis(spec)
    spec.input_space.check_against(spec.op, spec.case_params)
    if spec.fuzz_space is not None:
        unknown = sorted(set(spec.fuzz_space.domains) - set(spec.case_params) - set(CASE_FIELDS))
        if unknown:
            raise ValueError(f"{spec.op}: fuzz space draws {', '.join(unknown)}, which no case of "
                             f"{spec.op} carries")
    return _SPECS.add(spec.op, spec, replace=True)


def get_spec(op: str) -> OpSpec:
    check_op(op)
    ensure_loaded()
    if op not in _SPECS:
        raise KeyError(f"op {op!r} has no spec yet; its kernel family is not shipped")
    return _SPECS.get(op)


def all_specs() -> dict[str, OpSpec]:
    ensure_loaded()
    return dict(_SPECS.items())
