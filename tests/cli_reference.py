"""The command reference in docs/cli.md, generated from the command line's own `--help`.

`python -m tests.cli_reference --write` rewrites the part of docs/cli.md between the two
markers below; `tests/test_cli_reference.py` fails when the checked-in page and `--help`
disagree, so the page can never drift from the commands it documents.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from cli import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
BEGIN = "<!-- generated from --help: python -m tests.cli_reference --write -->"
END = "<!-- end of the generated reference -->"
WIDTH = 200


def _commands(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    for name in sorted(group.list_commands(click.Context(group))):
        command = group.get_command(click.Context(group), name)
        if command is None or command.hidden:
            continue
        yield [*path, name], command
        if isinstance(command, click.Group):
            yield from _commands(command, [*path, name])


def _help(path: list[str]) -> str:
    """What `gpuledger PATH --help` prints, at a fixed width so the page is the same anywhere."""
    done = CliRunner().invoke(
        main,
        [*path, "--help"],
        prog_name="gpuledger",
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )
    assert done.exit_code == 0, done.output
    return done.output


def reference() -> str:
    """Every command's help, in command order, as one Markdown section."""
    parts = [
        BEGIN,
        "",
        "## Reference",
        "",
        "Each command's `--help`, as the command line prints it.",
        "",
    ]
    for path, _ in _commands(main, []):
        parts += [
            f"### gpuledger {' '.join(path)}",
            "",
            "```text",
            _help(path).rstrip(),
            "```",
            "",
        ]
    parts.append(END)
    return "\n".join(parts) + "\n"


def page_with(reference_text: str, page: str) -> str:
    """`page` with its generated part replaced (appended when it has none yet)."""
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        return head + reference_text + rest.split(END, 1)[1].removeprefix("\n")
    return page.rstrip("\n") + "\n\n" + reference_text


def main_write() -> int:
    PAGE.write_text(page_with(reference(), PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print("usage: python -m tests.cli_reference --write", file=sys.stderr)
        sys.exit(2)
    sys.exit(main_write())
