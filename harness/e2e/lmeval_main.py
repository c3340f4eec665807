"""lm-eval's ``run`` for the one local GSM8K task: ``python -m harness.e2e.lmeval_main``.

lm-eval's CLI indexes every task it bundles before it reads ``--include_path`` (about 14 s of
CPU per start on a 2-core machine, once per concurrency level). This entry point gives lm-eval's
``simple_evaluate`` a TaskManager that knows only the task folder, then saves the results and
samples with lm-eval's ``EvaluationTracker`` and prints its table, as the CLI does. What scores
(the ``local-completions`` model, the task, its filters and metrics, the seeds) is lm-eval's,
with its defaults; the arguments keep the CLI's names.

lm-eval stores torch's ``collect_env`` report in its results (``pretty_env_info``), which runs
``pip list``, ``lscpu`` and GPU queries: about 1 s of each level on a 2-core machine, for a text
nothing reads (the E2E run records the machine and server in its own fingerprint). That one
field says so instead; lm-eval's other environment fields are its own.
"""

from __future__ import annotations

import argparse
import sys


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness.e2e.lmeval_main")
    parser.add_argument("--model", default="local-completions")
    parser.add_argument("--model_args", required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--include_path", required=True)
    parser.add_argument("--output_path", required=True)
    parser.add_argument("--limit", type=float)
    parser.add_argument("--gen_kwargs", default="")
    return parser.parse_args(argv)


ENV_INFO = ("not collected (harness.e2e.lmeval_main): torch's collect_env takes ~1 s a level; "
            "the E2E run's fingerprint (e2e.json) records the machine and the server")


def _without_torch_collect_env() -> None:
    import torch.utils.collect_env

    torch.utils.collect_env.get_pretty_env_info = lambda: ENV_INFO


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    _without_torch_collect_env()
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import make_table, setup_logging, simple_parse_args_string

    setup_logging()
    tracker = EvaluationTracker(output_path=args.output_path)
    results = simple_evaluate(
        model=args.model, model_args=simple_parse_args_string(args.model_args),
        tasks=args.tasks.split(","), limit=args.limit, log_samples=True,
        gen_kwargs=simple_parse_args_string(args.gen_kwargs) or None,
        evaluation_tracker=tracker,
        task_manager=TaskManager(include_path=args.include_path, include_defaults=False))
    if results is None:
        print("lm-eval returned no results", file=sys.stderr)
        return 1
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    print(make_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
