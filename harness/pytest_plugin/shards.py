"""``--shard I/N``: one of N deterministic, cost-balanced parts of a run.

Sweeps beyond one host run on the schedulers teams already have (a CI matrix, a Slurm array):
each job runs ``harness run --shard I/N`` with the same profile and commit, writes its own
report folder, and ``harness report DIR...`` merges the folders into one report. Every job
collects the same tests in the same order, so the split needs no coordination: tests are
dealt largest expected cost first to the currently lightest shard (longest-processing-time
scheduling), ties broken by node id. The expected cost of a sweep case is its element count
(tokens x width, the float64 reference's work); other tests count as one small case. E2E tests
share one model server and stay together in one shard.
"""

from __future__ import annotations

import hashlib
import heapq
import re

SMALL_CASE = 64 * 4096
"""The expected cost of a test that is not a sized sweep case."""


class ShardError(ValueError):
    pass


def parse(text: str) -> tuple[int, int]:
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not found or not 1 <= int(found.group(1)) <= int(found.group(2)):
        raise ShardError(f"--shard {text!r}: write I/N with 1 <= I <= N, e.g. --shard 2/3")
    return int(found.group(1)), int(found.group(2))


def expected_cost(item) -> int:
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    case = getattr(target, "case", None)
    if case is None:
        return SMALL_CASE
    tokens = case.tokens or max(target.profile.tokens)
    elements = target.spec.case_elements(case.with_tokens(tokens)) or 0
    return max(elements, tokens * 64, SMALL_CASE)


def split(items: list, index: int, count: int) -> tuple[list, list]:
    """(this shard's items in their original order, the others)."""
    groups: dict[str, list] = {}
    for item in items:
        key = "e2e" if "e2e" in item.keywords else item.nodeid
        groups.setdefault(key, []).append(item)
    jobs = sorted(groups.items(), key=lambda kv: (-sum(expected_cost(i) for i in kv[1]), kv[0]))
    loads = [(0, shard) for shard in range(count)]
    owner: dict[str, int] = {}
    for key, members in jobs:
        load, shard = heapq.heappop(loads)
        owner[key] = shard
        heapq.heappush(loads, (load + sum(expected_cost(i) for i in members), shard))
    mine = {id(i) for key, members in groups.items() if owner[key] == index - 1 for i in members}
    return [i for i in items if id(i) in mine], [i for i in items if id(i) not in mine]


def collected_digest(items: list) -> tuple[str, tuple[str, ...]]:
    """(sha256 of the sorted node ids, the ids): shards of one sweep must have collected the
    same tests, or their union is not the sweep (hosts with different vendor packages collect
    different implementations)."""
    ids = tuple(sorted(item.nodeid for item in items))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16], ids
