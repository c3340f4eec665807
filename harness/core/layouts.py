"""Layouts: the views real callers pass instead of fresh, packed tensors (case parameter ``layout``).

vLLM and SGLang hand these ops slices: a residual stream that is a view of a wider buffer, mixes
that are column slices of one shared buffer, a transposed ``comb``, logits rows with padded
strides, q and weights as views, a storage offset off a 16-byte boundary. Every op gets the axis
from ``register_spec`` (``with_layout_axis``): ``layout`` among its case parameters, one
``layouts`` cell per layout in its input space, and the layout among what the fuzzer draws.

The engine lays a case's inputs out after making them and computing the truth (``lay_out``): each
tensor input the op does not write in place becomes a view inside a larger parent buffer whose
other bytes hold a sentinel (NaN for floats, 0xFF for 1-byte types, the minimum for integers), so
a kernel that reads outside its view reads garbage. After the call, every parent's bytes outside
the views must be as they were (``ParentGuard``): a write there names the input and where.

An implementation that requires contiguous (or 16-byte aligned) inputs declares it
(``declared={"inputs": "contiguous"}``, ``"contiguous, aligned"``) and must then refuse a view
with an error naming the input and the requirement (``refusal``); a silent wrong answer on a
view fails like any other.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable, Mapping

import torch

from harness.core.fuzz_space import Choice
from harness.core.input_space import Cell

PARAM = "layout"
CONTIGUOUS = "contiguous"
GUARD_ROWS = 3
"""Rows (or, for flat parents, whole copies of 16 bytes) of sentinel after the last row of a view."""
PAD_BYTES = 16


@dataclasses.dataclass(frozen=True)
class Layout:
    name: str
    what: str
    """The views, and the callers that pass them."""
    build: Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]] | None
    """Tensors by input name -> their views (same values); None: left as made."""
    compiled_only: str = ""
    """Why the Triton interpreter cannot show what this layout tests (then its Triton cases run
    on a GPU only); empty: it can."""


def _pad(t: torch.Tensor) -> int:
    """Elements in PAD_BYTES: padding that keeps 16-byte alignment where the rows had it."""
    return max(1, PAD_BYTES // t.element_size())


def fill_sentinel(buf: torch.Tensor) -> torch.Tensor:
    """NaN for floats wider than a byte, 0xFF bytes for 1-byte types (an fp8 NaN), the minimum
    for other integers, True for bools."""
    if buf.element_size() == 1 and buf.dtype != torch.bool:
        buf.view(torch.uint8).fill_(0xFF)
    elif buf.dtype == torch.bool:
        buf.fill_(True)
    elif buf.is_floating_point() or buf.is_complex():
        buf.fill_(float("nan"))
    else:
        buf.fill_(torch.iinfo(buf.dtype).min)
    return buf


def _parent(shape, like: torch.Tensor) -> torch.Tensor:
    return fill_sentinel(torch.empty(shape, dtype=like.dtype, device=like.device))


def _rows(t: torch.Tensor) -> tuple[int, int]:
    """(rows, packed width of a row): dim 0 and the product of the others."""
    rows = t.shape[0]
    return rows, math.prod(t.shape[1:])


def _placeable(t: torch.Tensor) -> bool:
    return t.dim() >= 1 and t.numel() > 0


def _row_stride(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if not _placeable(t):
            continue
        rows, width = _rows(t)
        parent = _parent((rows + GUARD_ROWS, width + _pad(t)), t)
        out[name] = parent[:rows, :width].view(t.shape).copy_(t)
    return out


def _column_slice(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inputs of one dtype, device and row count share one parent, side by side, each after a
    gap of sentinel columns."""
    groups: dict[tuple, list[str]] = {}
    for name, t in tensors.items():
        if _placeable(t):
            groups.setdefault((t.dtype, t.device, t.shape[0]), []).append(name)
    out = {}
    for (_, _, rows), names in groups.items():
        first = tensors[names[0]]
        gap = _pad(first)
        widths = [_rows(tensors[n])[1] for n in names]
        parent = _parent((rows + GUARD_ROWS, sum(widths) + gap * (len(names) + 1)), first)
        col = gap
        for name, width in zip(names, widths):
            t = tensors[name]
            out[name] = parent[:rows, col:col + width].view(t.shape).copy_(t)
            col += width + gap
    return out


def _flat_parent(t: torch.Tensor, offset: int) -> torch.Tensor:
    return _parent((offset + t.numel() + GUARD_ROWS * _pad(t),), t)


def _transposed(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
            continue
        swapped = (*t.shape[:-2], t.shape[-1], t.shape[-2])
        parent = _flat_parent(t, 0)[:t.numel()].view(swapped)
        out[name] = parent.transpose(-1, -2).copy_(t)
    return out


def _misaligned(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One element past the parent's start (1 to 8 bytes, never a multiple of 16); 4 bytes for
    uint8, the packed byte records (the K cache) whose fp32 fields keep their 4-byte alignment."""
    out = {}
    for name, t in tensors.items():
        if _placeable(t):
            skip = 4 if t.dtype == torch.uint8 else 1
            out[name] = _flat_parent(t, skip)[skip:skip + t.numel()].view(t.shape).copy_(t)
    return out


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout(CONTIGUOUS, "fresh, packed tensors (every other cell's cases)", None),
    Layout("row-stride", "every input the rows of a wider buffer: row stride past the packed "
           "width (a residual stream sliced from a wider buffer, logits rows with padded "
           "strides, q and weights as views)", _row_stride),
    Layout("column-slice", "inputs of one dtype and row count as column slices of one shared "
           "buffer, at a column offset (mHC's post and comb mixes in one [T, m*(m+2)]-like "
           "buffer, row_starts and row_ends interleaved)", _column_slice),
    Layout("transposed", "inputs of two or more dims stored with their last two dims swapped "
           "(a transposed comb, fn stored as its transpose)", _transposed),
    Layout("misaligned", "packed, but starting one element (uint8 byte records: 4 bytes) past a "
           "16-byte boundary: a storage offset that breaks 16-byte vector loads", _misaligned,
           compiled_only="the interpreter's loads are numpy reads, with no alignment to break "
           "(a compiled kernel specialises on 16-byte alignment)"),
)}
NAMES = tuple(LAYOUTS)


def check_name(name: Any) -> Layout:
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; choose one of {', '.join(NAMES)}")
    return LAYOUTS[name]


def interpreter_blind(case) -> str:
    """Why a Triton kernel under the CPU interpreter cannot be judged on ``case``'s layout, or
    an empty string."""
    name = case.param(PARAM, CONTIGUOUS)
    return LAYOUTS[name].compiled_only if name in LAYOUTS else ""


def cells() -> tuple[Cell, ...]:
    return tuple(Cell("layouts", layout.name, layout.what, {PARAM: layout.name})
                 for layout in LAYOUTS.values())


FUZZ_DOMAIN = Choice(NAMES)


def with_layout_axis(spec) -> None:
    """Give ``spec`` (an OpSpec) the layout axis: the ``layout`` case parameter (default
    contiguous), its cells and its fuzz domain, unless the spec declares them itself."""
    from harness.core.input_space import InputSpace

    if PARAM not in spec.case_params:
        spec.case_params = {**spec.case_params, PARAM: CONTIGUOUS}
    if not any(cell.axis == "layouts" for cell in spec.input_space.cells):
        spec.input_space = InputSpace(spec.input_space.cells + cells())
    if spec.fuzz_space is not None and PARAM not in spec.fuzz_space.domains:
        spec.fuzz_space = dataclasses.replace(
            spec.fuzz_space, domains={**spec.fuzz_space.domains, PARAM: FUZZ_DOMAIN})


def tensor_inputs(inputs: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Every tensor among the inputs, tuples (``kv``) flattened to ``name[i]``."""
    found = {}
    for name, value in inputs.items():
        if name in skip:
            continue
        parts = value if isinstance(value, (tuple, list)) else (value,)
        for i, part in enumerate(parts):
            if isinstance(part, torch.Tensor):
                found[name if len(parts) == 1 else f"{name}[{i}]"] = part
    return found


def _put_back(inputs: dict, views: Mapping[str, torch.Tensor]) -> dict:
    out = dict(inputs)
    for key, view in views.items():
        name, _, index = key.partition("[")
        if not index:
            out[name] = view
            continue
        parts = list(out[name])
        parts[int(index.rstrip("]"))] = view
        out[name] = type(inputs[name])(parts)
    return out


def lay_out(spec, case, inputs: dict) -> dict:
    """``inputs`` with the case's layout applied to every tensor input but those the op writes
    in place (``spec.written_args``) and those its contract requires packed
    (``spec.contiguous_args``), then the spec's ``after_layout`` (arguments that restate a
    layout, such as top-k's strides)."""
    layout = check_name(case.param(PARAM, CONTIGUOUS))
    if layout.build is None:
        return inputs
    views = layout.build(tensor_inputs(inputs, spec.written_args + spec.contiguous_args))
    return spec.after_layout(_put_back(inputs, views))


# ---- guards around every view ----------------------------------------------------------------

def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),))


def _covers_all(t: torch.Tensor) -> bool:
    return (t.is_contiguous() and t.storage_offset() == 0
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _covered(nbytes: int, views: list[torch.Tensor], device) -> torch.Tensor:
    mask = torch.zeros(nbytes, dtype=torch.bool, device=device)
    for v in views:
        size = v.element_size()
        elements = torch.zeros(nbytes // size, dtype=torch.bool, device=device)
        elements.as_strided(v.shape, v.stride(), v.storage_offset()).fill_(True)
        mask[:elements.numel() * size] |= elements.repeat_interleave(size)
    return mask


@dataclasses.dataclass
class ParentGuard:
    """The bytes of one parent buffer outside every input view into it, as they were."""
    views: dict[str, torch.Tensor]
    storage: torch.Tensor
    outside: torch.Tensor
    before: torch.Tensor

    def restore(self) -> None:
        self.storage[self.outside] = self.before

    def written(self) -> str | None:
        now = self.storage[self.outside]
        bad = now != self.before
        count = int(bad.sum())
        if not count:
            return None
        at = int(self.outside.nonzero()[int(bad.nonzero()[0])])
        name, view = next(iter(self.views.items()))
        size = view.element_size()
        offset = (at - view.storage_offset() * size) // size
        where = f"element {offset} from the start of {name}"
        if view.dim() and view.stride(0) > 0:
            row, col = divmod(offset, view.stride(0))
            where += f": row {row}, element {col} of its row stride {view.stride(0)}"
        return (f"{', '.join(self.views)}: {count} bytes of the parent buffer outside the "
                f"view{'s' if len(self.views) > 1 else ''} (first at {where})")


def parent_guards(inputs: Mapping[str, Any], skip: tuple[str, ...] = ()) -> list[ParentGuard]:
    """A guard for every storage that an input views only in part (a layout's parent, top-k's
    strided logits), so that a write outside the views is seen."""
    by_storage: dict[tuple, dict[str, torch.Tensor]] = {}
    for name, t in tensor_inputs(inputs, skip).items():
        if t.numel() == 0 or t.untyped_storage().nbytes() == 0:
            continue
        key = (t.device, t.untyped_storage().data_ptr())
        by_storage.setdefault(key, {})[name] = t
    guards = []
    for views in by_storage.values():
        if any(_covers_all(v) for v in views.values()):
            continue
        first = next(iter(views.values()))
        storage = _storage_bytes(first)
        outside = ~_covered(storage.numel(), list(views.values()), first.device)
        if bool(outside.any()):
            guards.append(ParentGuard(views, storage, outside, storage[outside].clone()))
    return guards


def written_outside(guards: list[ParentGuard]) -> list[str]:
    return [w for w in (g.written() for g in guards) if w]


# ---- declared requirements and refusals --------------------------------------------------------

DECLARED = "inputs"
"""The key of ``register(..., declared=...)`` under which an implementation states what its
inputs must be: a comma-separated list of REQUIREMENTS."""
REQUIREMENTS: dict[str, tuple[Callable[[torch.Tensor], bool], tuple[str, ...]]] = {
    "contiguous": (lambda t: t.is_contiguous(), ("contiguous", "stride")),
    "aligned": (lambda t: t.data_ptr() % 16 == 0, ("align",)),
}
"""Requirement -> (does a tensor meet it, words one of which a refusal must use)."""


def requirements(impl) -> list[str]:
    text = dict(getattr(impl, "declared", {}) or {}).get(DECLARED, "")
    wanted = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in REQUIREMENTS]
    if unknown:
        raise ValueError(f"{impl.op}/{impl.name} declares inputs {text!r}: {', '.join(unknown)} "
                         f"is no requirement the harness knows; declare any of "
                         f"{', '.join(REQUIREMENTS)}, comma-separated")
    return wanted


def unmet(impl, inputs: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Input name -> the declared requirements it does not meet."""
    wanted = requirements(impl)
    found = {}
    for name, t in tensor_inputs(inputs, skip).items():
        missing = [w for w in wanted if t.numel() and not REQUIREMENTS[w][0](t)]
        if missing:
            found[name] = missing
    return found


INPUT_NAMES_ATTR = "contract_input_names"
"""Attribute of an implementation's callable (or of one it wraps, ``__wrapped__``): contract
input -> the name the implementation's own code calls it (an adapter binding a vendor's
``x`` to the contract's ``hidden_states`` sets ``{"hidden_states": "x"}``)."""


def own_names(fn) -> dict[str, str]:
    """Contract input -> the implementation's own name for it, read along ``__wrapped__``."""
    seen = 0
    while fn is not None and seen < 16:
        names = getattr(fn, INPUT_NAMES_ATTR, None)
        if names:
            return dict(names)
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return {}


def refusal(exc: BaseException, broken: Mapping[str, list[str]],
            names: Mapping[str, str] | None = None) -> bool:
    """Whether ``exc`` is a clear refusal of inputs that break a declared requirement: its
    message names one of them (by the contract's name or, as a word, by the implementation's
    own name for it, ``names``) and says what it lacks."""
    text = str(exc).lower()
    names = names or {}
    for name, missing in broken.items():
        contract = name.split("[")[0].lower()
        own = names.get(name.split("[")[0], "").lower()
        named = contract in text or bool(own and re.search(rf"\b{re.escape(own)}\b", text))
        if named and any(word in text for req in missing for word in REQUIREMENTS[req][1]):
            return True
    return False


# ---- what a kernel that ignores a layout reads (the seeded faults') ----------------------------

def as_packed(t: torch.Tensor) -> torch.Tensor:
    """The memory from ``t``'s first element read as if ``t`` were packed (a kernel that indexes
    by shape and ignores the strides): ``t`` itself when it is contiguous."""
    return t.as_strided(t.shape, torch.empty(t.shape, device="meta").stride(), t.storage_offset())


def as_aligned_down(t: torch.Tensor) -> torch.Tensor:
    """``t``'s view moved back to the 16-byte boundary at or below its first element (vector
    loads that assume an aligned base): ``t`` itself when it is aligned."""
    size = t.element_size()
    base = t.untyped_storage().data_ptr()
    aligned = (t.data_ptr() // PAD_BYTES * PAD_BYTES - base) // size
    return t.as_strided(t.shape, t.stride(), max(aligned, 0))
