"""pyarrow without its pandas probe (ledger/arrow_probe.py): a command that never uses
pandas does not import it, and one that does (CSV) still gets it. Each check runs in a
fresh interpreter, since this one has pandas loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.reconcile_helpers import Scenario, ingest

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_conversions_after_the_probe_is_answered_import_no_pandas() -> None:
    out = _python(
        "import sys, datetime\n"
        "from ledger.arrow_probe import skip_pandas_probe_on_import\n"
        "skip_pandas_probe_on_import()\n"
        "import pyarrow as pa, pyarrow.compute as pc\n"
        "pa.array([1, None]); pa.array(['x', None]); pa.scalar(3)\n"
        "pa.array([(1, 'a')], pa.struct([('a', pa.int64()), ('b', pa.string())]))\n"
        "pc.equal(pa.array([1]), 1); pa.array([datetime.datetime(2026, 1, 1)])\n"
        "pa.table({'a': [1], 'b': ['x']})\n"
        "print('pandas' in sys.modules)\n"
    )
    assert out == "False"


def test_pandas_is_still_there_when_asked_for() -> None:
    out = _python(
        "import sys\n"
        "from ledger.arrow_probe import skip_pandas_probe_on_import\n"
        "skip_pandas_probe_on_import()\n"
        "import pyarrow as pa\n"
        "table = pa.table({'a': [1, None]})\n"
        "frame = table.to_pandas()\n"
        "import pandas as pd\n"
        "back = pa.array(pd.Series([1.0, float('nan')]))\n"
        "print(type(frame).__name__, back.null_count, pa.table(frame).num_rows)\n"
    )
    assert out == "DataFrame 1 2"


def test_without_the_probe_answered_pyarrow_imports_pandas() -> None:
    """The check above can fail: a plain conversion does import pandas."""
    out = _python("import sys, pyarrow as pa; pa.array([1]); print('pandas' in sys.modules)")
    assert out == "True"


def test_reconcile_as_json_imports_no_pandas_and_csv_still_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    s = Scenario()
    s.grant("a1", gpus=8, at="10:00")
    s.line("L1", "a1", "10:00", "11:00", gpus=8, amount="1.00")
    from ledger import Store

    store = Store(url)
    store.init()
    ingest(store, s.events)
    store.close()
    # the command's group (`cli.main`), not the program (`cli.run`), which would end the
    # process before this asks what it imported
    run = (
        "import sys\n"
        "from cli import main\n"
        "try:\n"
        f"    main(['reconcile', '--db', {url!r}, '--format', '{{fmt}}'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('pandas' in sys.modules)\n"
    )
    *_json, imported = _python(run.replace("{fmt}", "json")).splitlines()
    assert imported == "False"
    *csv, imported = _python(run.replace("{fmt}", "csv")).splitlines()  # through pandas
    assert imported == "True"
    assert csv[0].startswith("invoice_id,") and len(csv) == 2
