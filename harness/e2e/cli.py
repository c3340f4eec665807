"""``harness e2e`` and ``harness golden``: argument parsing and exit codes.

Exit codes (git bisect run compatible): 0 pass, 1 regression, 125 inconclusive or error.
"""

from __future__ import annotations

import contextlib
import json
import pathlib

from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE
from harness.options import add_options
from harness.e2e.smollm import SMOLLM_GGUF, smollm_gguf  # noqa: F401 (this module's face)

EXIT = {"pass": EXIT_GOOD, "regression": EXIT_BAD, "inconclusive": EXIT_UNTESTABLE,
        "error": EXIT_UNTESTABLE}
CROSS_LEVEL_DEFAULT = {"llama-cpp": 0.0}
"""Share of greedy outputs that may change between concurrency levels, by server kind:
llama-cpp-python's server evaluates one request at a time, so none may; batching servers (vLLM)
are not judged on it unless --max-changed-across-levels says so (e.g. 0 with batch-invariant
kernels)."""
BATCHING = ("vllm",)
"""Server kinds whose outputs depend on the batch: their goldens keep every level's record."""


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _gen_kwargs(text: str | None) -> dict:
    return _pairs([p for p in (text or "").split(",") if p], "--gen-kwargs")


def config_from_args(args):
    from harness.e2e.run import E2EConfig
    from harness.e2e.server import llama_cpp_command, vllm_command

    kind, cmd, server_env = "attached", None, {}
    if getattr(args, "vllm", False):
        kind, cmd, server_env = "vllm", *_vllm_server(args)
    elif args.smollm or args.gguf:
        kind, cmd = "llama-cpp", llama_cpp_command(args.gguf or smollm_gguf(), args.n_ctx,
                                                   args.llama_arg or [])
    elif args.vllm_model:
        kind, cmd = "vllm", vllm_command(args.vllm_model, args.vllm_arg or [])
    elif args.server_cmd:
        kind, cmd = "command", list(args.server_cmd)
    elif not args.base_url:
        raise SystemExit("harness e2e: say which server: --base-url URL (running), --smollm, "
                         "--gguf PATH, --vllm, --vllm-model MODEL or -- CMD ARG... ({host}/{port} "
                         "filled in)")
    levels = tuple(int(x) for x in args.levels.split(","))
    if any(lv < 1 for lv in levels):
        raise SystemExit(f"--levels {args.levels}: concurrency levels must be >= 1")
    across = args.max_changed_across_levels
    if across is None:
        across = CROSS_LEVEL_DEFAULT.get(kind)
    elif across.lower() == "none":
        across = None
    else:
        across = float(across)
    return E2EConfig(
        output=pathlib.Path(args.output), levels=levels, base_url=args.base_url,
        server_cmd=cmd, server_env={**server_env, **_pairs(args.server_env, "--server-env")},
        server_kind=kind,
        model=args.model, golden=args.golden, limit=args.limit,
        num_fewshot=5 if args.num_fewshot is None else args.num_fewshot,
        gen_kwargs=_gen_kwargs(args.gen_kwargs), data_dir=args.data,
        ready_timeout=args.ready_timeout, level_timeout=args.level_timeout,
        request_timeout=args.request_timeout,
        kernel_settings=_pairs(args.kernel_setting, "--kernel-setting"), hardware=args.hardware,
        accept_aggregate_golden=getattr(args, "accept_aggregate_golden", False),
        logprobs_top_n=args.logprobs,
        max_changed_across_levels=across)


def _vllm_server(args) -> tuple[list[str], dict[str, str]]:
    """``--vllm``: this machine's vLLM server (harness.e2e.vllm_cpu) with the E2E loop's
    settings, on SmolLM2-135M made from the shipped GGUF unless --vllm-model names a folder."""
    from harness.e2e import vllm_cpu

    python = vllm_cpu.server_python()
    vllm_cpu.version(python)
    if args.vllm_model:
        model = pathlib.Path(args.vllm_model)
        vllm_cpu.check_model_folder(model)
    else:
        model = vllm_cpu.model_folder(python)
    settings = {**vllm_cpu.SETTINGS, "--dtype": args.vllm_dtype}
    output = pathlib.Path(args.output)
    return (vllm_cpu.command(python, str(model.resolve()), settings, args.vllm_arg or []),
            vllm_cpu.env(output))


def cmd_e2e(args) -> int:
    from harness.e2e.data import DataError
    from harness.e2e.golden import GoldenError
    from harness.e2e.run import run

    if args.output is None:
        from harness.reports.meta import new_report_folder

        args.output = str(new_report_folder(None) / "e2e")
    try:
        _settings_like_golden(args)
        summary = run(config_from_args(args))
    except (GoldenError, DataError, FileNotFoundError, ValueError) as exc:
        print(f"harness e2e: could not test: {exc}")
        return EXIT["error"]
    except ImportError as exc:
        print(f"harness e2e: could not test: {exc.name or exc} is not installed; the E2E run "
              "needs lm-eval: bash scripts/install.sh (or pip install -e '.[e2e]')")
        return EXIT["error"]
    print((pathlib.Path(args.output) / "e2e_summary.md").read_text())
    print(f"E2E verdict: {summary['verdict']} (report: {args.output})")
    return EXIT[summary["verdict"]]


def _settings_like_golden(args) -> None:
    """What --limit and --num-fewshot leave unsaid comes from the golden: a golden recorded on
    the first N questions sets N (the whole test set could not be compared with it question by
    question anyway), and its shot count sets the prompts (another count could only be refused)."""
    if not args.golden:
        return
    from harness.e2e import golden

    gold = golden.load(args.golden)
    limit = gold["task"].get("limit")
    if args.limit is None and limit and gold.get("per_question"):
        args.limit = int(limit)
        print(f"harness e2e: --limit {limit}, the golden's (it holds the first {limit} "
              "questions); pass --limit to choose")
    shots = gold["task"].get("num_fewshot")
    if args.num_fewshot is None and shots is not None:
        args.num_fewshot = int(shots)
        print(f"harness e2e: --num-fewshot {shots}, the golden's")
    gen = gold["task"].get("gen_kwargs")
    if args.gen_kwargs is None and gen:
        args.gen_kwargs = ",".join(f"{k}={v}" for k, v in gen.items())
        print(f"harness e2e: --gen-kwargs {args.gen_kwargs}, the golden's")


def _record(args) -> int:
    """Run the levels against no golden and write the lowest one as a new golden; a batching
    server's golden holds every level, and with ``--reruns N`` drift limits measured on N more
    clean runs (harness.e2e.noise)."""
    from harness.e2e import golden, noise
    from harness.e2e.run import run, server_for

    like = golden.load(args.like) if args.like else None
    if like is not None:
        if args.num_fewshot is None:
            args.num_fewshot = like["task"]["num_fewshot"]
        args.limit = like["task"]["limit"] if args.limit is None else args.limit
        args.gen_kwargs = args.gen_kwargs or ",".join(
            f"{k}={v}" for k, v in (like["task"].get("gen_kwargs") or {}).items())
    if args.output is None:
        from harness.reports.meta import new_report_folder

        args.output = str(new_report_folder(None) / "golden-record")
    args.golden = None
    base = pathlib.Path(args.output)
    runs = []
    first = config_from_args(args)
    first.output.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        # The recording run and its reruns share one server; a recording alone launches it only
        # for the levels --output does not hold finished (a resumed recording).
        srv = stack.enter_context(server_for(first)) if args.reruns else None
        for i in range(1 + args.reruns):
            args.output = str(base if i == 0 else base / f"rerun{i}")
            summary = run(config_from_args(args), srv)
            levels = [json.loads((pathlib.Path(args.output) / "levels" / f"c{lv}.json").read_text())
                      for lv in summary["meta"]["levels"]]
            bad = [lv["level"] for lv in levels if lv.get("error") or lv.get("logprobs_failed")]
            if bad or summary["verdict"] in ("error", "regression"):
                raise golden.GoldenError(f"the recording run was not clean (verdict "
                                         f"{summary['verdict']}, level(s) {bad} failed): see "
                                         f"{args.output}/e2e_summary.md; fix the server and retry")
            runs.append((summary, levels))
    summary, levels = runs[0]
    judge = {**((like or {}).get("judge") or {}),
             **{k: v for k, v in (("max_changed_fraction", args.max_changed_fraction),
                                  ("max_drop", args.max_drop)) if v is not None}}
    if args.reruns:
        judge.pop("drift", None)
        judge["drift"] = noise.limits(
            [{lv["level"]: lv.get("logprobs") or {} for lv in lvs} for _, lvs in runs],
            f"{summary['meta']['server']['kind']} {summary['meta']['fingerprint'].get('server_version')}")
    source = args.source or (f"harness golden record from {base}"
                             + (f", settings like {like['name']}" if like else "")
                             + (f", {args.reruns} clean rerun(s)" if args.reruns else ""))
    lowest = min(levels, key=lambda lv: lv["level"])
    every = levels if summary["meta"]["server"]["kind"] in BATCHING or args.reruns else None
    new = golden.from_level(lowest, summary["meta"], args.name, source, args.notes or "", judge,
                            levels=every)
    print(f"wrote {golden.write(new, pathlib.Path(args.path) if args.path else None)}")
    return 0


def cmd_golden(args) -> int:
    from harness.e2e import golden
    from harness.e2e.data import DataError

    try:
        if args.action == "list":
            for path in sorted(golden.GOLDEN_DIR.glob("*.json")):
                g = golden.load(str(path))
                accs = ", ".join(f"{m} {v['acc']:.4f} (n={v['n']})" for m, v in g["metrics"].items())
                print(f"{g['name']}: {g['task']['num_fewshot']}-shot, {accs}, "
                      f"per-question: {'yes' if g.get('per_question') else 'no'}, logprobs: "
                      f"{len(g['logprobs']) if g.get('logprobs') else 'no (accuracy-only)'}")
        elif args.action in ("show", "check"):
            g = golden.load(args.name)
            print(json.dumps({k: v for k, v in g.items() if k != "per_question"}, indent=1)
                  if args.action == "show" else f"{args.name}: valid")
        elif args.action == "record":
            return _record(args)
        elif args.action == "update":
            run_dir = pathlib.Path(args.run)
            summary = json.loads((run_dir / "e2e.json").read_text())
            level = json.loads((run_dir / "levels" / f"c{args.level}.json").read_text())
            if level.get("error"):
                raise golden.GoldenError(f"level {args.level} of {run_dir} is an error: "
                                         f"{level['error'][:200]}")
            judge = {k: v for k, v in (("max_changed_fraction", args.max_changed_fraction),
                                       ("max_drop", args.max_drop)) if v is not None}
            new = golden.from_level(level, summary["meta"], args.name, args.source or "",
                                    args.notes or "", judge)
            print(f"wrote {golden.write(new, pathlib.Path(args.path) if args.path else None)}")
    except DataError as exc:
        print(f"harness golden: could not record: {exc}")
        return EXIT["error"]
    except (golden.GoldenError, FileNotFoundError) as exc:
        print(f"harness golden: could not {args.action}: {exc}")
        return EXIT["error"]
    return 0


def add_parsers(sub) -> None:
    """``harness e2e`` and ``harness golden ACTION``, their options from ``harness.options``."""
    e2e = sub.add_parser("e2e", help="GSM8K through lm-eval per concurrency level, judged "
                         "against a golden baseline (0 pass, 1 regression, 125 inconclusive/error)")
    add_options(e2e, "e2e")
    e2e.set_defaults(func=cmd_e2e)

    gold = sub.add_parser("golden", help="list, show, check, record or update golden baselines")
    gsub = gold.add_subparsers(dest="action", required=True)
    helps = {"list": "the golden files and their numbers", "show": "show one golden file",
             "check": "check one golden file",
             "record": "run a trusted server and write its lowest level as a golden, e.g. on a "
                       "new machine: harness golden record --like GOLDEN --name NAME --smollm",
             "update": "write a golden file from a level of an e2e run"}
    for action, help_ in helps.items():
        parser = gsub.add_parser(action, help=help_)
        if action != "list":
            add_options(parser, f"golden {action}")
    gold.set_defaults(func=cmd_golden)
