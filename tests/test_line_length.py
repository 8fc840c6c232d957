"""Issue 27: lines under 100 columns, in every .py file of the project."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 99
PATHS = ["ledger", "ingest", "schemas", "reconcile", "fixtures", "tests", "bench", "cli.py"]


def _files() -> list[Path]:
    out = []
    for name in PATHS:
        path = ROOT / name
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def test_every_py_file_is_covered() -> None:
    """A new folder of Python (or a module at the top) is checked too: it must be listed."""
    holding = {
        p.name
        for p in ROOT.iterdir()
        if not p.name.startswith(".")
        and (p.suffix == ".py" or (p.is_dir() and next(p.rglob("*.py"), None) is not None))
    }
    assert holding <= set(PATHS)


def test_no_line_passes_99_columns() -> None:
    files = _files()
    assert len(files) > 250
    long = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > LIMIT
    ]
    assert long == []
