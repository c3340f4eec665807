"""``harness speed`` puts the benchmarks' ``--json`` runs side by side over time: it names the
rows slower or faster than the previous run on the same device, never compares two devices,
never turns a timing into a verdict, and refuses files that are not benchmark output, naming
the file. The runs are written by the benchmarks' own ``document`` (benchmarks/common.py), so
the writer and the reader cannot drift apart; and the benchmarks' tables survive the rows that
feed no trend (a call that ran out of memory)."""

import importlib.util
import json
import pathlib
import re

import pandas as pd
import pytest

from harness.cli import main as harness
from suites.browser import BROWSER, NO_BROWSER, dump_dom

pytestmark = [pytest.mark.host_only, pytest.mark.machinery]

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def _benchmarks_common():
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "common.py"
    spec = importlib.util.spec_from_file_location("benchmarks_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_without_a_time_gets_no_copy_figure_instead_of_ending_the_benchmark():
    """bench_mhc keeps a row with a note and no time where a call ran out of memory; the
    same-size copy column must pass it over (it raised on the NaN time, losing the run)."""
    rows = pd.DataFrame([{"op": "mhc_pre", "shape": "T=131072", "impl": "torch", "note": "OOM"},
                         {"op": "fp8_mqa_logits", "shape": "4096x4096", "impl": "triton",
                          "ms": 0.3, "figure": 950.0, "unit": "TFLOP/s"}])
    out = _benchmarks_common().with_same_size_copy(rows)
    assert out["% of same-size copy"].isna().all() and len(out) == 2


def _write_run(folder: pathlib.Path, device: str, when: str, ms: dict, name="bench_demo",
               label=""):
    common = _benchmarks_common()
    rows = [{"op": "mhc_pre", "shape": "T=8192", "impl": impl, "ms": t, "figure": 59.0 / t,
             "unit": "GB/s", "timing": "graph", "host us": 100.0} for impl, t in ms.items()]
    df = common.with_ratios(pd.DataFrame(rows), {"GB/s": 3000.0}, peers=("torch",))
    doc = common.document(name, df, {"copy GB/s": 3000.0}, device)
    doc["time"] = when
    path = folder / f"{when[:19].replace(':', '')}-{device[:11].replace(' ', '')}-{name}{label}.json"
    path.write_text(json.dumps(doc))
    return path


def _three_runs(folder: pathlib.Path) -> pathlib.Path:
    """Two H100 runs (triton 1.25x slower in the second, torch within noise) and an H200 run."""
    folder.mkdir()
    _write_run(folder, H100, "2026-11-20T01:00:00+00:00", {"triton": 0.100, "torch": 0.400})
    _write_run(folder, H100, "2026-11-21T01:00:00+00:00", {"triton": 0.125, "torch": 0.412})
    _write_run(folder, H200, "2026-11-22T01:00:00+00:00", {"triton": 0.050, "torch": 0.300})
    (folder / "run.json").write_text(json.dumps({"profile": "nightly"}))  # a report's, passed over
    return folder


def test_rows_that_moved_since_the_previous_run_on_the_same_device_are_named(tmp_path):
    runs, out = _three_runs(tmp_path / "bench"), tmp_path / "speed"
    assert harness(["speed", str(runs), "--output", str(out)]) == 0

    text = (out / "speed.md").read_text()
    headline = text.splitlines()[0]
    assert headline == ("# Kernel speed: 1 row(s) slower, 0 faster, 1 within 10% of the previous "
                        "run on the same device (bench_demo)")
    slower = text.split("## Slower than the previous run")[1].split("##")[0]
    assert "triton" in slower and "1.25x the time" in slower and "torch" not in slower
    assert "python benchmarks/bench_demo.py" in slower
    assert H200 not in slower and "## Faster" not in text
    assert f"## bench_demo on {H200}" in text and f"## bench_demo on {H100}" in text
    table = pd.read_csv(out / "speed.csv")
    assert len(table) == 6 and set(table["device"]) == {H100, H200}
    assert sorted(p.name for p in out.glob("*.png")) == [
        "speed_bench-demo_NVIDIA-H100-80GB-HBM3.png", "speed_bench-demo_NVIDIA-H200.png"]
    html = (out / "speed.html").read_text()
    assert headline[2:] in html and 'id="slower"' in html and 'id="faster"' not in html


def test_two_builds_timed_in_the_same_second_stay_two_runs(tmp_path, capsys):
    when = "2026-11-20T01:00:00+00:00"
    a = _write_run(tmp_path, H100, when, {"triton": 0.100}, label="-a")
    b = _write_run(tmp_path, H100, when, {"triton": 0.150}, label="-b")
    assert harness(["speed", str(a), str(b), "--output", str(tmp_path / "out")]) == 0
    assert "1 row(s) slower" in capsys.readouterr().out.splitlines()[0]


def test_rows_without_a_limit_are_still_compared(tmp_path, capsys):
    for when, ms in (("2026-11-20T01:00:00+00:00", 0.1), ("2026-11-21T01:00:00+00:00", 0.2)):
        path = _write_run(tmp_path, H100, when, {"triton": ms})
        doc = json.loads(path.read_text())
        for row in doc["rows"]:
            del row["% of limit"], row["limit"]
        path.write_text(json.dumps(doc))
    assert harness(["speed", str(tmp_path), "--output", str(tmp_path / "out")]) == 0
    assert "1 row(s) slower" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)
def test_speed_page_loads_with_the_slower_row_and_its_plots(tmp_path):
    out = tmp_path / "speed"
    assert harness(["speed", str(_three_runs(tmp_path / "bench")), "--output", str(out)]) == 0
    dom = dump_dom(out / "speed.html")
    assert '<h1 id="headline">Kernel speed: 1 row(s) slower' in dom
    slower = re.search(r'<section class="slower" id="slower">(.*?)</section>', dom, re.S)
    assert slower and "1.25x the time" in slower.group(1), dom[:2000]
    images = re.findall(r"<img [^>]*>", dom)
    assert len(images) == 2 and all(re.search(r'data-loaded="[1-9]\d*"', i) for i in images), images


def test_a_single_run_is_shown_with_nothing_to_compare(tmp_path, capsys):
    path = _write_run(tmp_path, H100, "2026-11-20T01:00:00+00:00", {"triton": 0.1})
    assert harness(["speed", str(path), "--output", str(tmp_path / "out")]) == 0
    assert "none with an earlier run of the same benchmark on the same device" in \
        capsys.readouterr().out


def test_a_row_that_could_not_be_timed_is_kept_with_its_note(tmp_path):
    path = _write_run(tmp_path, H100, "2026-11-20T01:00:00+00:00", {"triton": 0.1})
    doc = json.loads(path.read_text())
    doc["rows"].append({"op": "mhc_pre", "shape": "T=131072", "impl": "torch", "note": "OOM"})
    path.write_text(json.dumps(doc))
    assert harness(["speed", str(path), "--output", str(tmp_path / "out")]) == 0
    shown = (tmp_path / "out" / "speed.md").read_text()
    assert re.search(r"\|\s*mhc_pre\s*\|\s*T=131072\s*\|\s*torch\s*\|[\s|]*OOM", shown)
    assert len(pd.read_csv(tmp_path / "out" / "speed.csv")) == 2


def _broken(kind: str, folder: pathlib.Path) -> pathlib.Path:
    path = _write_run(folder, H100, "2026-11-20T01:00:00+00:00", {"triton": 0.1})
    doc = json.loads(path.read_text())
    if kind == "truncated":
        path.write_text(path.read_text()[:40])
        return path
    if kind == "no rows":
        del doc["rows"]
    elif kind == "no time per row":
        doc["rows"][0]["ms"] = None
    elif kind == "not a date":
        doc["time"] = "last tuesday"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind, says", [
    ("truncated", "not readable as JSON"),
    ("no rows", "'rows' is missing"),
    ("no time per row", "row 0 (mhc_pre T=8192 triton) has no positive 'ms'"),
    ("not a date", "'time' 'last tuesday' is not an ISO date"),
])
def test_a_file_that_is_not_benchmark_output_is_refused_by_name(tmp_path, capsys, kind, says):
    path = _broken(kind, tmp_path)
    assert harness(["speed", str(tmp_path), "--output", str(tmp_path / "out")]) == 125
    err = capsys.readouterr().err
    assert str(path) in err and says in err and "benchmarks/bench_mhc.py --json" in err
    assert not (tmp_path / "out" / "speed.md").exists()


@pytest.mark.parametrize("where", ["empty folder", "missing path"])
def test_nothing_to_read_is_refused(tmp_path, capsys, where):
    target = tmp_path / ("bench" if where == "empty folder" else "nowhere")
    if where == "empty folder":
        target.mkdir()
    assert harness(["speed", str(target), "--output", str(tmp_path / "out")]) == 125
    err = capsys.readouterr().err
    assert str(target) in err
    assert ("no benchmark JSON" if where == "empty folder" else "no such file or folder") in err
