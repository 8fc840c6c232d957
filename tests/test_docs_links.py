"""The repository's docs stand alone: every relative link and every repository path they
name resolves to a file in the checkout, and none sends the reader outside it (to
../shared or to a design file that is not in the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The pages a reader of the repository reads: the README, docs/, the benchmarks' page and
#: the reconciliation rules.
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "bench" / "README.md",
        ROOT / "reconcile" / "RULES.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)

#: Every page explains the project to a newcomer: none may send them outside it.
READER_PAGES = PAGES

#: `[text](target)`, the target up to its closing parenthesis or a title.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: A path into one of the project's folders, as prose and code spans name them
#: (`ledger/proofs.py`, docs/serving.md). Globs and placeholders are not paths.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:docs|bench|reconcile|ingest|ledger|schemas|fixtures|tests)/[\w./"
    r"*<>-]*[\w*>])"
)
#: What lies outside the repository.
OUTSIDE = re.compile(r"\.\./shared|shared/realdata|DESIGN\.md|DESIGN §")


def links(text: str) -> list[str]:
    """The relative targets of a page's markdown links, without their #fragment."""
    found = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # https:, mailto:, an anchor in the same page
        found.append(target.split("#", 1)[0])
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        resolved = (page.parent / target).resolve()
        if not resolved.is_relative_to(root):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(target)
    return broken


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    """Repository paths the page names in its text that do not exist in the checkout."""
    missing = []
    for name in sorted(set(REPO_PATH.findall(page.read_text(encoding="utf-8")))):
        if any(c in name for c in "*<>{}") or (root / name).exists():
            continue
        missing.append(name)
    return missing


def outside_references(page: Path) -> list[str]:
    lines = page.read_text(encoding="utf-8").splitlines()
    return [f"line {n}: {line.strip()}" for n, line in enumerate(lines, 1) if OUTSIDE.search(line)]


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_named_paths_exist(page: Path) -> None:
    assert missing_paths(page) == []


@pytest.mark.parametrize("page", READER_PAGES, ids=name)
def test_nothing_points_outside_the_repository(page: Path) -> None:
    assert outside_references(page) == []


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {target for target in links(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"}
    assert sorted(pages - listed) == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "proofs.py").write_text("", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "See [the rules](reconcile/NO_SUCH.md), [proofs](ledger/proofs.py#L3), [up](../x.md),\n"
        "[a site](https://example.org/x.md), [an anchor](#top), `ledger/proofs.py`,\n"
        "`ledger/no_such_module.py`, `tests/test_fuzz_*.py` and ../shared/DESIGN.md.\n",
        encoding="utf-8",
    )
    assert links(page.read_text(encoding="utf-8")) == [
        "reconcile/NO_SUCH.md",
        "ledger/proofs.py",
        "../x.md",
    ]
    assert broken_links(page, tmp_path) == [
        "reconcile/NO_SUCH.md",
        "../x.md (outside the repository)",
    ]
    assert missing_paths(page, tmp_path) == ["ledger/no_such_module.py", "reconcile/NO_SUCH.md"]
    assert outside_references(page) == [
        "line 3: `ledger/no_such_module.py`, `tests/test_fuzz_*.py` and ../shared/DESIGN.md."
    ]
