"""The import directions the tree promises (reconcile/__init__.py, docs/architecture.md):
ledger below everything, the reconcile engine below its outputs, and cli.py on top.
Read from the source with `ast`, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: package (or module path prefix) -> prefixes it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "schemas": ("ledger", "ingest", "reconcile", "cli", "fixtures", "bench"),
    "ledger": ("ingest", "reconcile", "cli", "fixtures", "bench"),
    "ingest": ("reconcile", "cli", "bench"),
    "reconcile.engine": (
        "reconcile.reports",
        "reconcile.packets",
        "reconcile.demo",
        "ingest",
        "cli",
        "bench",
    ),
    "reconcile.reports": ("reconcile.packets", "reconcile.demo", "ingest", "cli", "bench"),
    "reconcile.packets": ("reconcile.demo", "ingest", "cli", "bench"),
}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, absolute names (`from x import y` gives x and x.y)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            # `from reconcile import x` re-exports the engine: the package root counts as the
            # engine
            target = "reconcile.engine" if name == "reconcile" else name
            if any(within(target, bad) for bad in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_directions(package: str) -> None:
    assert violations(package, FORBIDDEN[package]) == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from reconcile.packets.dispute import build\n    import ingest.sacct\n"
    )
    assert imported_modules(source) >= {
        "reconcile.packets.dispute",
        "reconcile.packets.dispute.build",
        "ingest.sacct",
    }


def test_every_reconcile_module_is_in_a_room() -> None:
    """Only the package root and the demo sit beside the three rooms."""
    loose = sorted(p.name for p in (ROOT / "reconcile").glob("*.py"))
    assert loose == ["__init__.py", "demo.py"]
