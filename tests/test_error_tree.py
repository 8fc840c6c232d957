"""One error tree: every error class of the library derives from one root, through the
branch that says whose fault it is (bad input: exit 2; a failed check: exit 1), and no
message the library raises names a command-line flag (the command line adds it)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import click

from cli import main
from schemas.errors import BadInput, CheckFailed, GpuledgerError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "ledger", "ingest", "reconcile", "fixtures")


def _modules() -> Iterator[object]:
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            yield importlib.import_module(info.name)


def _error_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == getattr(
                module, "__name__", None
            ):
                found.append(cls)
    return found


def test_every_error_class_derives_from_the_root_through_one_branch() -> None:
    classes = _error_classes()
    assert len(classes) > 20  # the walk found the library's errors, not nothing
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, GpuledgerError)
    ]
    assert outside == []
    both = [
        c.__qualname__ for c in classes if issubclass(c, BadInput) and issubclass(c, CheckFailed)
    ]
    assert both == []


def test_public_error_class_names_are_unique() -> None:
    names = [c.__qualname__ for c in _error_classes() if not c.__qualname__.startswith("_")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _cli_flags(group: click.Group) -> set[str]:
    flags: set[str] = set()
    for command in group.commands.values():
        if isinstance(command, click.Group):
            flags |= _cli_flags(command)
        for param in command.params:
            flags |= {o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")}
    return flags - {"--help", "--version"}


def _raised_strings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for part in ast.walk(node.exc):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    yield node.lineno, part.value


def test_no_raised_message_names_a_command_line_flag() -> None:
    flags = _cli_flags(main)
    assert {"--db", "--tenant", "--since-size"} <= flags
    pattern = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
    named: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in _raised_strings(path):
                named += [
                    f"{path.relative_to(ROOT)}:{line}: {flag}"
                    for flag in pattern.findall(text)
                    if flag in flags
                ]
    assert named == []


#: Where a library string may be a flag: the declaration of a flag (a report's options,
#: generated into the command line) and a command line the library writes out for the
#: user to run (a function holding the word "gpuledger", e.g. `packet_command`).
FLAG_DECLARATIONS = {"ReportOption", "option"}


def _flag_strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string literal (or f-string's leading text) of `path` that starts with a flag
    (`--name`), outside a flag's declaration and a command line written for the user."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed: set[int] = set()
    for node in ast.walk(tree):
        declares = isinstance(node, ast.Call) and (
            getattr(node.func, "id", None) in FLAG_DECLARATIONS
            or getattr(node.func, "attr", None) in FLAG_DECLARATIONS
        )
        writes_a_command = isinstance(node, ast.FunctionDef) and any(
            isinstance(n, ast.Constant) and n.value == "gpuledger" for n in ast.walk(node)
        )
        if declares or writes_a_command:
            allowed |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in allowed and node.values:
            node = node.values[0]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in allowed
            and re.match(r"--[a-z]", node.value)
        ):
            yield node.lineno, node.value


def test_no_library_string_is_a_flag_not_even_one_passed_on_in_a_variable() -> None:
    """A flag handed to a helper that puts it in a message (`where="--timezone"`) is caught
    here: the library passes the option's name (`option="timezone"`) and the CLI adds it."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in _flag_strings(path)
    ]
    assert found == []


def test_the_flag_scan_sees_a_flag_in_a_variable(tmp_path: Path) -> None:
    source = tmp_path / "lib.py"
    source.write_text(
        'def parse(text, where="--timezone"):\n    raise ValueError(f"{where}: bad")\n'
        'check(name, "--name")\n'
        'ReportOption("since", "--since", "Window start.")\n'
        'def command():\n    return ["gpuledger", "packet", "--promise"]\n'
    )
    assert [text for _, text in _flag_strings(source)] == ["--timezone", "--name"]


def test_the_cli_maps_each_branch_to_its_exit_code() -> None:
    from click.testing import CliRunner

    @main.command("raise-for-test", hidden=True)
    @click.argument("kind")
    def raise_for_test(kind: str) -> None:
        raise (
            BadInput("bad thing", option="since_size")
            if kind == "input"
            else CheckFailed("broken thing")
        )

    try:
        runner = CliRunner()
        bad = runner.invoke(main, ["raise-for-test", "input"])
        assert bad.exit_code == 2, bad.output
        assert "--since-size: bad thing" in bad.output
        broken = runner.invoke(main, ["raise-for-test", "check"])
        assert broken.exit_code == 1, broken.output
        assert "broken thing" in broken.output
        assert "Traceback" not in bad.output + broken.output
    finally:
        main.commands.pop("raise-for-test")
