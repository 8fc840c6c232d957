"""pyarrow without its pandas probe.

The first time pyarrow turns Python values into Arrow (`pa.array` of a list, a compute
function given a Python number, `pa.scalar`), it asks whether each value might be a pandas
object, and to know, it imports pandas: about 0.15 s of CPU and 50 MB a process, paid by a
command that never touches pandas (a reconciliation written as JSON or Parquet, a page of
entries read from SQLite). gpuledger never hands pyarrow a pandas object, so a command
tells pyarrow once, before any conversion, that there is none to look for
(`skip_pandas_probe`).

Nothing is lost where pandas is wanted: pyarrow imports it again when asked for pandas
(`Table.to_pandas`, the CSV writer's path); only the question "is this Python value a
pandas object?" is answered no, which for gpuledger's values it always is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that says pandas is not installed (while the probe runs only)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def skip_pandas_probe() -> bool:
    """Answer pyarrow's pandas probe with "not installed", unless pandas is imported
    already (then the probe costs nothing). True when the probe was answered so."""
    if "pandas" in sys.modules:
        return False
    import pyarrow as pa

    shim = getattr(pa.lib, "_pandas_api", None)
    if shim is None:  # a pyarrow without the shim: it probes as it will
        return False
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        present = bool(shim.have_pandas)  # the Python side's probe: tried once, remembered
        pa.array([0])  # the C++ side's (its first conversion of Python values), likewise
    finally:
        sys.meta_path.remove(finder)
    return not present


class _WhenPyarrowLoads(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when pyarrow is first imported, has it answer its pandas
    probe (`skip_pandas_probe`) as soon as it has loaded, then steps aside."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pyarrow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)  # as the other finders find it
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenSkipProbe(spec.loader)
        return spec


class _ThenSkipProbe(importlib.abc.Loader):
    """pyarrow's own loader, then `skip_pandas_probe`."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self._loader  # pyarrow's own again
        skip_pandas_probe()

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface
        return getattr(self._loader, name)


def skip_pandas_probe_on_import() -> None:
    """`skip_pandas_probe` as soon as pyarrow is imported, if it ever is in this process
    (a command that needs no Arrow pays nothing); at once if it is imported already."""
    if "pyarrow" in sys.modules:
        skip_pandas_probe()
    elif not any(isinstance(finder, _WhenPyarrowLoads) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WhenPyarrowLoads())
