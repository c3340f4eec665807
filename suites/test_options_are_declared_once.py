"""Every option of the ``harness`` commands and of the pytest plugin comes from one table
(``harness/options/``): one name per meaning, the old spellings parsed into the same selection
with a warning, and ``harness run`` handing pytest its selection as a file, not re-spelt."""

from __future__ import annotations

import argparse
import types
import warnings

import pytest

from harness.cli import SUITES, build_parser, main, pytest_argv
from harness.options import (COMMANDS, OPTIONS, SELECTION_FLAG, OldArity, OldSpelling,
                             add_options, markdown_table, options_for)
from harness.options.selection import SELECTION_DESTS, Selection, selection_flags_in
from harness.pytest_plugin import context
from harness.pytest_plugin.options import check_names

pytestmark = pytest.mark.machinery


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name in the table ("run", "golden record")."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_commands(sub, f"{prefix}{name} "))
    return found


def _accepted(parser: argparse.ArgumentParser) -> set[str]:
    """The flags (and positionals' names) a parser accepts, help and subcommands left out."""
    out = set()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        out |= set(action.option_strings) or {action.dest}
    return out


def _declared(command: str) -> set[str]:
    if command not in COMMANDS:
        return set()
    return {flag for o in options_for(command) for flag in o.flags} | {
        d.flag for o in options_for(command) for d in o.deprecated if command in d.commands}


def test_every_command_option_comes_from_the_table():
    commands = _commands(build_parser())
    assert {"run", "bisect", "fuzz", "e2e", "golden record", "golden update"} <= set(commands)
    for name, parser in commands.items():
        assert _accepted(parser) == _declared(name), name


def test_every_plugin_option_comes_from_the_table(pytestconfig):
    group = pytestconfig._parser.getgroup("harness")
    assert {n for option in group.options for n in option.names()} == _declared("pytest")
    for option in options_for("pytest"):
        assert hasattr(pytestconfig.option, option.dest), option.flags


def test_one_name_per_meaning():
    flags = [flag for option in OPTIONS for flag in option.flags]
    assert len(flags) == len(set(flags)), "a flag declared in two rows"
    for option in OPTIONS:
        for old in option.deprecated:
            assert old.flag in option.flags or old.flag not in flags, old.flag
    dests = {}
    for option in OPTIONS:
        for flag in option.flags:
            assert dests.setdefault(flag, option.dest) == option.dest
    for command in ("pytest", "run", "bisect", "fuzz"):
        assert "--op" in _declared(command)
    commands = _commands(build_parser())
    for name, parser in commands.items():
        for action in parser._actions:
            if "--ops" in action.option_strings or "--fuzz" in action.option_strings \
                    or "--budget" in action.option_strings:
                assert isinstance(action, OldSpelling), (name, action.option_strings)
            if "--device" in action.option_strings:
                assert tuple(action.choices) == ("cuda", "cpu"), name
    assert "--fuzz-minutes" in _declared("run") and "--fuzz-minutes" in _declared("fuzz")
    assert isinstance(_action(commands["run"], "--ab"), OldArity)


def _action(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def test_the_plugin_takes_the_device_choices_too(pytestconfig):
    group = pytestconfig._parser.getgroup("harness")
    device = next(o for o in group.options if "--device" in o.names())
    assert tuple(device.attrs()["choices"]) == ("cuda", "cpu")


NEW_AND_OLD = [
    (["run", "--op", "mhc_post", "--op", "mhc_pre"], ["run", "--ops", "mhc_post", "mhc_pre"],
     "--ops is deprecated, use --op OP (repeatable)"),
    (["run", "--ab", "torch,ext"], ["run", "--ab", "torch", "ext"],
     "--ab A B is deprecated, use --ab A,B"),
    (["run", "--fuzz-minutes", "0"], ["run", "--fuzz", "0"],
     "--fuzz is deprecated, use --fuzz-minutes MINUTES"),
    (["bisect", "--op", "mhc_post"], ["bisect", "--ops", "mhc_post"],
     "--ops is deprecated, use --op OP (repeatable)"),
    (["fuzz", "--op", "mhc_post"], ["fuzz", "--ops", "mhc_post"],
     "--ops is deprecated, use --op OP (repeatable)"),
    (["fuzz", "--fuzz-minutes", "2"], ["fuzz", "--budget", "2"],
     "--budget is deprecated, use --fuzz-minutes MINUTES"),
]


@pytest.mark.parametrize("new,old,note", NEW_AND_OLD, ids=[" ".join(o) for _, o, _ in NEW_AND_OLD])
def test_an_old_spelling_parses_as_the_new_one_and_warns(new, old, note, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parsed_new = build_parser().parse_args(new)
    assert capsys.readouterr().err == ""
    with pytest.warns(DeprecationWarning, match=note.split(" is ")[0]):
        parsed_old = build_parser().parse_args(old)
    assert f"harness: {note}" in capsys.readouterr().err
    assert vars(parsed_old) == vars(parsed_new)
    if new[0] in ("run", "bisect"):
        assert Selection.from_namespace(parsed_old) == Selection.from_namespace(parsed_new)


def test_harness_run_hands_pytest_the_selection_file(tmp_path):
    file = tmp_path / "selection.json"
    argv = pytest_argv(file, tmp_path, workers="2", passthrough=["-k", "T7"])
    assert argv[argv.index(SELECTION_FLAG) + 1] == str(file.resolve())
    assert not selection_flags_in(argv)
    for flag in ("--profile", "--op", "--impl", "--require", "--impl-module", "--ab", "--device",
                 "--shard"):
        assert flag not in argv
    for kept in (["-m", "not machinery"], ["-n", "2"], ["-p", "no:cacheprovider"],
                 ["--report-dir", str(tmp_path)]):
        assert any(argv[i:i + 2] == kept for i in range(len(argv))), kept
    assert argv[-2:] == ["-k", "T7"]
    assert "-m" not in pytest_argv(file, tmp_path, self_tests=True)


def test_selection_options_after_the_double_dash_still_select_and_warn(capsys):
    """``harness run -- --impl X`` (earlier releases passed it on to pytest) joins the selection
    file, with a deprecation note; the other arguments after -- stay pytest's."""
    from harness.cli import _fold_selection_flags

    before = Selection(profile="smoke", impls=("torch",))
    with pytest.warns(DeprecationWarning, match="after --"):
        chosen, rest = _fold_selection_flags(before, ["-k", "T7", "--impl=ext", "--op",
                                                      "mhc_post", "--ab", "torch,ext", "-x"])
    assert chosen == Selection(profile="smoke", impls=("torch", "ext"), ops=("mhc_post",),
                               ab=("torch", "ext"))
    assert rest == ["-k", "T7", "-x"]
    assert "harness: --impl --op --ab after -- is deprecated" in capsys.readouterr().err
    assert _fold_selection_flags(before, ["-k", "T7"]) == (before, ["-k", "T7"])
    with pytest.raises(SystemExit, match="after --"):
        _fold_selection_flags(before, ["--device", "tpu"])


FULL = Selection(profile="ci", ops=("mhc_post",), impls=("torch", "ext"), require=("triton",),
                 ab=("torch", "ext"), impl_modules=("my.py",), device="cpu", shard="2/4",
                 accept_partial_coverage=True, interpreted_vendors="skip",
                 save_cases=("mhc_pre",))


@pytest.mark.parametrize("chosen", [Selection(), FULL], ids=["defaults", "every-field"])
def test_a_selection_round_trips(chosen, tmp_path):
    assert Selection.from_json(chosen.to_json()) == chosen
    assert Selection.read(chosen.write(tmp_path)) == chosen
    parser = argparse.ArgumentParser()
    add_options(parser, "pytest")
    spelt = chosen.pytest_args()
    assert Selection.from_namespace(parser.parse_args(spelt)) == chosen
    assert set(SELECTION_DESTS.values()) <= set(vars(parser.parse_args([])))


def _pytest_config(*args: str):
    parser = argparse.ArgumentParser()
    add_options(parser, "pytest")
    option = parser.parse_args(list(args))
    return types.SimpleNamespace(option=option, getoption=lambda name: getattr(option, name))


def test_the_file_or_the_options_never_both(tmp_path):
    path = str(FULL.write(tmp_path))
    assert context.given_selection(_pytest_config(SELECTION_FLAG, path)) == FULL
    assert context.given_selection(_pytest_config("--impl", "torch")).impls == ("torch",)
    with pytest.raises(pytest.UsageError, match="--impl"):
        context.given_selection(_pytest_config(SELECTION_FLAG, path, "--impl", "torch"))
    with pytest.raises(pytest.UsageError, match="--ab wants two names"):
        context.given_selection(_pytest_config("--ab", "torch"))
    (tmp_path / "bad.json").write_text('{"opz": []}')
    with pytest.raises(pytest.UsageError, match="not a selection"):
        context.given_selection(_pytest_config(SELECTION_FLAG, str(tmp_path / "bad.json")))


def test_unknown_names_are_usage_errors_naming_the_choices():
    with pytest.raises(pytest.UsageError, match="no such op; the ops are .*mhc_post"):
        check_names(Selection(ops=("mhc_pots",)))
    with pytest.raises(pytest.UsageError, match="no such implementation .* --impl-module"):
        check_names(Selection(ab=("torch", "nobody")))


def test_the_plugin_resolved_the_selection_once(pytestconfig):
    chosen = context.selection(pytestconfig)
    assert pytestconfig.stash[context.SELECTION] is chosen
    assert chosen.profile == context.run_profile(pytestconfig).name
    assert pytestconfig.getoption("profile") == chosen.profile


def test_the_table_prints_for_the_docs():
    table = markdown_table()
    assert "| pytest plugin, run, bisect, fuzz | `--op` |" in table
    assert "`--ops` (run, bisect, fuzz): use `--op OP (repeatable)`" in table


def test_the_docs_show_the_table_as_it_is():
    import pathlib

    usage = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    assert markdown_table() in usage, "docs/usage.md's option table is stale: paste the output " \
                                      "of `python -m harness.options` into its Options section"


def test_tests_named_after_the_double_dash_take_the_place_of_the_suites(tmp_path):
    """``harness run -- suites/test_x.py -k ...`` collects that file only (a run that names
    its tests need not import every suite); option values are not taken for test paths."""
    file = tmp_path / "selection.json"
    accuracy = str(SUITES / "test_mhc_accuracy.py")
    assert str(SUITES) in pytest_argv(file, tmp_path, passthrough=["-k", "T7"])
    for named in ([accuracy, "-k", "T7"], [f"{accuracy}::test_matches_reference"],
                  [str(SUITES)]):
        argv = pytest_argv(file, tmp_path, passthrough=named)
        assert argv.count(str(SUITES)) == (named == [str(SUITES)]), argv
    assert str(SUITES) in pytest_argv(file, tmp_path, passthrough=["-k", str(SUITES)])
