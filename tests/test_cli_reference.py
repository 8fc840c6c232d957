"""docs/cli.md's reference is the command line's own `--help`, word for word."""

from __future__ import annotations

from tests.cli_reference import BEGIN, END, PAGE, page_with, reference


def test_the_checked_in_reference_is_what_help_prints() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert BEGIN in page and END in page, (
        "no generated reference: run python -m tests.cli_reference --write"
    )
    assert page_with(reference(), page) == page, (
        "docs/cli.md differs from --help: run python -m tests.cli_reference --write and read the "
        "diff"
    )


def test_every_command_appears_once() -> None:
    text = reference()
    for name in (
        "ingest",
        "verify",
        "reconcile",
        "verify-packet",
        "report promises",
        "witness cosign",
    ):
        assert text.count(f"### gpuledger {name}\n") == 1
