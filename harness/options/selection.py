"""The run's :class:`Selection`: what the options of :mod:`harness.options` choose (profile, ops,
implementations, device, shard...), resolved once and handed from ``harness run`` to pytest as
one file (``--harness-selection``), and the helpers that read it back out of, or spell it into,
a pytest command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
from typing import Any

from harness.options import (DEVICES, SELECTION_FLAG, Deprecated, _replace, note_deprecated,
                             options_for)


class SelectionError(ValueError):
    """A selection that cannot be run: a malformed ``--ab``, a selection file that is not one."""


SELECTION_DESTS = {"profile": "profile", "ops": "op", "impls": "impl", "require": "require",
                   "ab": "ab", "impl_modules": "impl_module", "device": "device", "shard": "shard",
                   "accept_partial_coverage": "accept_partial_coverage",
                   "interpreted_vendors": "interpreted_vendors", "save_cases": "save_cases"}
"""Selection field -> the dest of its option (the same in argparse's namespace and pytest's)."""


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a run judges and where, resolved once: by ``harness run`` from its arguments
    (written to the report folder as selection.json for pytest), by the plugin in
    ``pytest_configure`` from that file or from pytest's own options."""

    profile: str | None = None
    ops: tuple[str, ...] = ()
    impls: tuple[str, ...] = ()
    require: tuple[str, ...] = ()
    ab: tuple[str, str] | None = None
    impl_modules: tuple[str, ...] = ()
    device: str | None = None
    shard: str | None = None
    accept_partial_coverage: bool = False
    interpreted_vendors: str = "run"
    save_cases: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("ops", "impls", "require", "impl_modules", "save_cases"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))
        if self.ab is not None:
            object.__setattr__(self, "ab", tuple(self.ab))
            if len(self.ab) != 2 or not all(self.ab):
                raise SelectionError(f"--ab wants two names, A,B; got {','.join(self.ab)!r}")
        if self.device not in (None, *DEVICES):
            raise SelectionError(f"--device {self.device!r}: choose one of {', '.join(DEVICES)}")

    @classmethod
    def from_namespace(cls, namespace) -> Selection:
        """From parsed options: argparse's namespace of a ``harness`` command or pytest's
        ``config.option`` (the same dests, from the same rows); options a command lacks keep
        their defaults."""
        values = {field: getattr(namespace, dest) for field, dest in SELECTION_DESTS.items()
                  if getattr(namespace, dest, None) is not None}
        if values.get("ab"):
            values["ab"] = tuple(values["ab"].split(","))
        return cls(**values)

    def option_values(self) -> dict[str, Any]:
        """dest -> value as the options parse it (``--ab`` as "A,B")."""
        values = {dest: getattr(self, field) for field, dest in SELECTION_DESTS.items()}
        values.update({dest: list(v) for dest, v in values.items() if isinstance(v, tuple)})
        values["ab"] = ",".join(self.ab) if self.ab else None
        return values

    def joined(self, other: Selection) -> Selection:
        """This selection with ``other``'s choices added: its lists extend these, its scalars
        that differ from the defaults replace them."""
        default = Selection()
        values = {}
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if isinstance(mine, tuple) and field.name != "ab":
                values[field.name] = mine + tuple(v for v in theirs if v not in mine)
            else:
                values[field.name] = theirs if theirs != getattr(default, field.name) else mine
        return Selection(**values)

    def named(self) -> set[str]:
        """The implementations ``--impl`` and ``--ab`` name (none: all)."""
        return set(self.impls) | set(self.ab or ())

    def adapter_scope(self) -> set[str]:
        """The implementations whose vendor adapters a run imports: those ``--impl``/``--ab``
        name and those it ``--require``s (a required one left unimported would read as unable to
        run); none named by ``--impl``/``--ab``: every adapter."""
        named = self.named()
        return named | set(self.require) if named else set()

    def pytest_args(self) -> list[str]:
        """The selection spelt out as pytest options: what reproduces it without the file."""
        rows = {o.dest: o for o in options_for("pytest")}
        args: list[str] = []
        for dest, value in self.option_values().items():
            flag, default = rows[dest].flags[-1], rows[dest].default_for("pytest")
            if isinstance(value, list):
                args += [a for v in value for a in (flag, v)]
            elif value is True:
                args.append(flag)
            elif value != default and value not in (None, False):
                args += [flag, str(value)]
        return args

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Selection:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SelectionError(f"not a selection (JSON): {exc}") from exc
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(values, dict) or set(values) - fields:
            raise SelectionError(f"not a selection: keys {sorted(set(values) - fields)} are "
                                 f"none of {sorted(fields)}" if isinstance(values, dict)
                                 else "not a selection: not a JSON object")
        return cls(**values)

    def write(self, folder: pathlib.Path) -> pathlib.Path:
        path = folder / "selection.json"
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def read(cls, path: str | pathlib.Path) -> Selection:
        try:
            text = pathlib.Path(path).read_text()
        except OSError as exc:
            raise SelectionError(f"{SELECTION_FLAG} {path}: {exc.strerror or exc}") from exc
        try:
            return cls.from_json(text)
        except (SelectionError, TypeError) as exc:
            raise SelectionError(f"{SELECTION_FLAG} {path}: {exc}") from exc


def selection_from_pytest_flags(args: list[str]) -> tuple[Selection, list[str]]:
    """The selection's pytest options among ``args``, parsed by the plugin's own rows, and the
    other arguments in their order."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for option in options_for("pytest"):
        if option.dest in SELECTION_DESTS.values():
            parser.add_argument(*option.flags, **option.kwargs_for("pytest"))
    try:
        namespace, rest = parser.parse_known_args(args)
    except argparse.ArgumentError as exc:
        raise SelectionError(str(exc)) from exc
    given = {dest for dest in SELECTION_DESTS.values()
             if getattr(namespace, dest) != parser.get_default(dest)}
    for dest in set(SELECTION_DESTS.values()) - given:
        setattr(namespace, dest, None)
    return Selection.from_namespace(namespace), rest


def note_deprecated_passthrough(flags: list[str]) -> None:
    note_deprecated(Deprecated(" ".join(dict.fromkeys(flags)) + " after --", frozenset({"run"}),
                               "them before -- (harness run's own options)", _replace))


def selection_options_given(namespace, command: str = "pytest") -> list[str]:
    """The selection's options set away from their defaults in ``namespace``."""
    rows = {o.dest: o for o in options_for(command)}
    return [rows[dest].flags[-1] for dest in SELECTION_DESTS.values()
            if dest in rows and getattr(namespace, dest, None) != rows[dest].default_for(command)]


def selection_flags_in(args: list[str]) -> list[str]:
    """The selection's pytest flags among ``args`` (``--op X``, ``--op=X``)."""
    flags = {o.flags[-1] for o in options_for("pytest") if o.dest in SELECTION_DESTS.values()}
    return [a.split("=")[0] for a in args if a.split("=")[0] in flags]


def spelt_out(args: list[str], selection: Selection | None = None) -> list[str]:
    """``args`` with ``--harness-selection PATH`` replaced by the selection's options: the
    pytest command line that reproduces the run (run.json's ``argv``)."""
    out, args = [], list(args)
    while args:
        arg = args.pop(0)
        if arg == SELECTION_FLAG and args:
            path = args.pop(0)
        elif arg.startswith(SELECTION_FLAG + "="):
            path = arg.split("=", 1)[1]
        else:
            out.append(arg)
            continue
        out += (selection or Selection.read(path)).pytest_args()
    return out
