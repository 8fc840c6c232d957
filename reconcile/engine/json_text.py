"""`reconcile --format json`'s text built column-wise: the lines in DuckDB, the tenants
from a few aggregates, byte for byte what `Reconciliation.document().to_json()` writes.

The document's lines are most of it (tens of MB a month of a fleet); building them as
Python objects (a Decimal an exact share, a dict a category) and validating them cost
several times the engine's own work. Here each line's text, at the indentation json.dumps
gives it (`indent=2`), is made by one query over the cells: exact shares by
`exact_shares_sql` (the frame's), summed per category and bearer as integers at the line's
places, and written as decimal text by `decimal_text_sql`, as `exact_text` would.

`json_text` answers None where this writer would not give the same bytes, and the caller
then writes the document as before: GPU-µs with a fraction of a second (numbers written
as floats), a text that is not printable ASCII (json.dumps escapes it), cells not grouped
by line, or no cells at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from functools import partial
from typing import Any, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reconcile.engine.money import (
    EXACT_LINE_US,
    _amount_int,
    decimal_text_sql,
    exact_shares_sql,
)
from reconcile.engine.placement import NOT_AS_SOLD, UNOBSERVED, share_of
from reconcile.engine.result import (
    ACCEPTANCE,
    BEARERS,
    CATEGORY_ORDER,
    PlacementSums,
    Reconciliation,
    _period_sql,
    _Tally,
    gpu_seconds,
)
from reconcile.engine.rules import LABEL_BY_CODE, SECOND
from reconcile.engine.scratch import scratch
from schemas.fast_json import dumps

_T = TypeVar("_T")

_TEXT_COLUMNS = (
    "invoice_id",
    "line_id",
    "tenant",
    "allocation_id",
    "currency",
    "billed_amount",
    "description",
)


def _q(expr: str, escape: bool = True) -> str:
    """SQL: a printable-ASCII text as a JSON string (only `\\` and `"` escaped, unless no
    text has them: `escape` false), NULL as null."""
    escaped = f"replace(replace({expr}, '\\', '\\\\'), '\"', '\\\"')" if escape else expr
    return f"CASE WHEN {expr} IS NULL THEN 'null' ELSE concat('\"', {escaped}, '\"') END"


def _seconds(expr: str) -> str:
    return f"CAST(({expr}) // {SECOND} AS VARCHAR)"


def _member(indent: int, name: str, value: str, last: bool = False) -> list[str]:
    """SQL pieces: `"name": value` at `indent` spaces, with its comma and newline."""
    return [f"'{' ' * indent}\"{name}\": '", value, f"'{'' if last else ','}\n'"]


def _quoted(expr: str) -> list[str]:
    """SQL pieces: a text known to need no escaping, as a JSON string."""
    return ["'\"'", expr, "'\"'"]


def _concat(pieces: list[str]) -> str:
    """SQL: the pieces as one text, made at once (a chain of `||` makes one text a piece)."""
    return "concat(" + ", ".join(pieces) + ")"


_BEARER_TEXT = _concat(
    ["CASE WHEN bearer_rank > first_bearer THEN ',\n' ELSE '' END", "'            \"'", "bearer"]
    + ["'\": {\n'"]
    + _member(14, "gpu_seconds", _seconds("us"))
    + _member(14, "amount", _concat(_quoted("money")))
    + _member(14, "amount_exact", _concat(_quoted("exact")), last=True)
    + ["'            }'"]
)

_CATEGORY_TEXT = _concat(
    ["CASE WHEN cat_rank > first_cat THEN ',\n' ELSE '' END", "'        \"'", "category"]
    + ["'\": {\n'"]
    + _member(10, "gpu_seconds", _seconds("us"))
    + _member(10, "amount", _concat(_quoted("money")))
    + _member(10, "amount_exact", _concat(_quoted("exact")))
    + ['\'          "bearer": "\'', "bearer", "'\"'"]
    # its end, where it has one bearer (most): in its own fragment, one fewer to sort
    + ["CASE WHEN several THEN ',\n          \"by_bearer\": {\n' ELSE '\n        }' END"]
)
#: The end of a category of several bearers: a fragment sorted after their texts.
_CATEGORY_END = "'\n          }\n        }'"


def _line_head(escape: bool) -> str:
    """SQL: a line's text up to its categories, with the separator before it."""
    return _concat(
        ["CASE WHEN line_no > 1 THEN ',\n' ELSE '' END", "'    {\n'"]
        + [
            piece
            for name, value in (
                ("invoice_id", _q("invoice_id", escape)),
                ("line_id", _q("line_id", escape)),
                ("tenant", _q("tenant", escape)),
                ("allocation_id", _q("allocation_id", escape)),
                ("gpu_seconds", _seconds("us")),
                ("amount", _concat(_quoted("money"))),
                ("currency", _q("currency", escape)),
                ("billed_amount", _q("billed_amount", escape)),
                ("period_start", _q("period_start", escape)),
                ("period_end", _q("period_end", escape)),
                ("description", _q("description", escape)),
            )
            for piece in _member(6, name, value)
        ]
        + ["'      \"categories\": {\n'"]
    )


_LINE_TAIL = _concat(
    ["'\n      },\n'", "'      \"productive_by_acceptance\": {\n'"]
    + [
        piece
        for i, state in enumerate(ACCEPTANCE)
        for piece in _member(8, state, _seconds(f"acc_{state}"), last=i == len(ACCEPTANCE) - 1)
    ]
    + ["'      }\n    }'"]
)

#: A line's amount is written at its last cell's minor unit, as the document writes it.
_LAST_MINOR = "arg_max(minor, row_no)"

_ACCEPTANCE_SUMS = ", ".join(
    f"sum(CASE WHEN acceptance = '{state}' THEN gpu_us ELSE 0 END) AS acc_{state}"
    for state in ACCEPTANCE
)

#: The lines' text as fragments with their place in the document (line, part, category,
#: bearer): a line's head, each category (its bearers' texts and its end after it where
#: it has several), the line's tail. Each fragment carries the separator
#: before it, so the document is the fragments' texts one after another in that order
#: (DuckDB sorts them by those keys, in parallel, into the Arrow it hands over: sorting the
#: keys in numpy and moving the texts after them cost a second copy of every text, about
#: 0.9 s at 500 GPUs for its first-touched memory); no ordered aggregate (a sort a group)
#: is made.
_SQL = f"""
WITH c AS (
    SELECT c.*, s.share_units, s.share_places, s.exact_places, l.category, l.bearer,
           l.acceptance, l.cat_rank, l.bearer_rank
    FROM cells c JOIN shares s ON s.row_no = c.row_no JOIN labels l ON l.code = c.label),
kc AS (
    SELECT line_no, category, any_value(cat_rank) AS cat_rank,
           min(bearer) <> max(bearer) AS several,
           CASE WHEN min(bearer) = max(bearer) THEN min(bearer) ELSE 'mixed' END AS bearer,
           sum(gpu_us) AS us, min(bearer_rank) AS first_bearer,
           {decimal_text_sql("sum(cents)", "any_value(minor)", "any_value(minor)")} AS money,
           {
    decimal_text_sql("sum(share_units)", "any_value(share_places)", "any_value(exact_places)")
} AS exact
    FROM c GROUP BY line_no, category),
kb AS (
    SELECT c.line_no, c.category, c.bearer, any_value(c.cat_rank) AS cat_rank,
           any_value(c.bearer_rank) AS bearer_rank, any_value(k.first_bearer) AS first_bearer,
           sum(c.gpu_us) AS us, sum(c.cents) AS cents, sum(c.share_units) AS units,
           any_value(c.share_places) AS places, any_value(c.exact_places) AS ep,
           any_value(c.minor) AS minor
    FROM c JOIN kc k ON k.line_no = c.line_no AND k.category = c.category WHERE k.several
    GROUP BY c.line_no, c.category, c.bearer),
line AS (
    SELECT g.* EXCLUDE (first_row), f.invoice_id, f.line_id, f.tenant, f.allocation_id,
           f.currency, f.billed_amount, f.description, f.ps, f.pe
    FROM (SELECT line_no, min(row_no) AS first_row, sum(gpu_us) AS us,
                 min(cat_rank) AS first_cat,
                 {decimal_text_sql("sum(cents)", _LAST_MINOR, _LAST_MINOR)} AS money,
                 {_ACCEPTANCE_SUMS}
          FROM c GROUP BY line_no) g
    JOIN cells f ON f.row_no = g.first_row),
texts AS (
    SELECT l.*, {_period_sql("l.ps")} AS period_start, {_period_sql("l.pe")} AS period_end
    FROM line l),
fragments AS (
    SELECT line_no, 0 AS part, 0 AS cat_rank, 0 AS sub, {{line_head}} AS text FROM texts
    UNION ALL
    SELECT line_no, 1, cat_rank, 0, {_CATEGORY_TEXT}
    FROM (SELECT k.*, l.first_cat FROM kc k JOIN line l USING (line_no))
    UNION ALL
    SELECT line_no, 1, cat_rank, 1 + bearer_rank, {_BEARER_TEXT}
    FROM (SELECT *, {decimal_text_sql("cents", "minor", "minor")} AS money,
                 {decimal_text_sql("units", "places", "ep")} AS exact
          FROM kb)
    UNION ALL
    SELECT line_no, 1, cat_rank, {len(BEARERS) + 1}, {_CATEGORY_END} FROM kc WHERE several
    UNION ALL
    SELECT line_no, 2, 0, 0, {_LINE_TAIL} FROM line)
SELECT text FROM fragments ORDER BY line_no, part, cat_rank, sub
"""

#: The tenants' placement figures (RULES.md 13), a group of lines at a time: per tenant,
#: currency, state, credit share and scales, the lines' GPU-µs, billed amounts (integers at
#: their scale) and customer-borne exact shares (at the line's places); `first` orders the
#: groups of a tenant and currency by their first line (whose minor unit PlacementSums keeps).
_PLACEMENT_GROUPS = f"""
WITH line AS (
    SELECT line_no, arg_min(tenant, row_no) AS tenant, arg_min(invoice_id, row_no) AS invoice_id,
           arg_min(line_id, row_no) AS line_id, coalesce(arg_min(currency, row_no), '') AS cur,
           arg_min(minor, row_no) AS minor, sum(gpu_us) AS us,
           arg_min(billed_amount, row_no) AS billed,
           sum(CASE WHEN bearer = 'customer' THEN share_units ELSE 0 END) AS borne,
           any_value(share_places) AS places
    FROM (SELECT c.*, s.share_units, s.share_places, l.bearer FROM cells c
          JOIN shares s ON s.row_no = c.row_no JOIN labels l ON l.code = c.label)
    GROUP BY line_no),
placed AS (
    SELECT l.*, coalesce(p.state, '{UNOBSERVED}') AS state, p.share,
           CAST(length(split_part(l.billed, '.', 2)) AS INTEGER) AS scale
    FROM line l LEFT JOIN placed_lines p
      ON p.tenant = l.tenant AND p.invoice_id = l.invoice_id AND p.line_id = l.line_id)
SELECT tenant, cur, state, share, scale, places, min(line_no) AS first,
       arg_min(minor, line_no), CAST(sum(us) AS VARCHAR),
       CAST(sum({_amount_int("scale", "billed")}) AS VARCHAR), CAST(sum(borne) AS VARCHAR)
FROM placed GROUP BY ALL ORDER BY tenant, cur, first
"""

_TENANT_KEYS = """
SELECT c.tenant, l.category, l.bearer, sum(c.gpu_us), sum(c.cents)
FROM cells c JOIN labels l ON l.code = c.label GROUP BY ALL ORDER BY min(c.row_no)
"""
_TENANT_ACCEPTANCE = """
SELECT c.tenant, l.acceptance, sum(c.gpu_us) FROM cells c JOIN labels l ON l.code = c.label
WHERE l.acceptance IS NOT NULL GROUP BY ALL
"""
_TENANT_MINOR = "SELECT tenant, arg_max(minor, row_no) FROM cells GROUP BY tenant"


def _labels() -> pa.Table:
    return pa.table(
        {
            "code": list(LABEL_BY_CODE),
            "category": [v.category for v in LABEL_BY_CODE.values()],
            "bearer": [v.bearer for v in LABEL_BY_CODE.values()],
            "acceptance": [v.acceptance for v in LABEL_BY_CODE.values()],
            "cat_rank": [CATEGORY_ORDER.index(v.category) for v in LABEL_BY_CODE.values()],
            "bearer_rank": [BEARERS.index(v.bearer) for v in LABEL_BY_CODE.values()],
        }
    )


def _writable(table: pa.Table) -> tuple[bool, bool]:
    """Whether this writer gives json.dumps's bytes for these cells, and whether some text
    of the lines' needs a JSON escape (`\\` or `"`)."""
    if table.num_rows == 0:
        return False, False
    whole = pc.all(pc.equal(pc.remainder(table.column("gpu_us"), SECOND), 0)).as_py()
    if not whole:
        return False, False
    escapes = False
    for name in _TEXT_COLUMNS:
        # a text column's distinct values: a few per thousand cells, matched once each
        values = pc.unique(table.column(name))
        if not pc.all(pc.match_substring_regex(pc.fill_null(values, ""), "^[ -~]*$")).as_py():
            return False, False
        escapes = escapes or bool(pc.any(pc.match_substring_regex(values, '["\\\\]')).as_py())
    return True, escapes


def json_text(result: Reconciliation) -> str | None:
    """The document's text (ending in a newline), or None where this writer does not apply."""
    data = json_bytes(result)
    return None if data is None else data.decode()


def json_bytes(result: Reconciliation) -> bytes | None:
    """`json_text`'s text as UTF-8, or None where this writer does not apply."""
    parts = json_parts(result)
    return None if parts is None else b"".join(parts)


def json_parts(result: Reconciliation) -> list[bytes | memoryview] | None:
    """`json_bytes`' text in parts, end to end (the lines' texts as views of the buffers
    DuckDB filled: a file is written from them with no copy of the document), or None
    where this writer does not apply."""
    table = result.table
    writable, escapes = _writable(table)
    if not writable:
        return None
    starts = result._line_starts()
    if starts is None:
        return None
    cells = _numbered(table, starts)
    with scratch() as con:
        con.register("cells", cells)
        if not _fits(con):
            return None  # the slow path raises MoneyOverflow, as it always has
    sql = _SQL.replace("{line_head}", _line_head(escapes))
    parts = [cells.slice(a, b - a) for a, b in _cuts(starts, table.num_rows)]
    texts = _in_threads([partial(_lines_text, part, sql) for part in parts])
    with scratch() as con:
        con.register("cells", cells)
        con.register("labels", _labels())
        con.register("shares", pa.concat_tables(shares for _, shares in texts))
        tenants = _tenants(con, result)
    lines = pa.chunked_array([c for text, _ in texts for c in text.chunks], texts[0][0].type)
    head = dumps({"period": result.period.as_dict(), "tenants": tenants}, indent=2)
    return _parts([head[: -len("\n}")].encode(), b',\n  "lines": [\n'], lines, [b"\n  ]\n}\n"])


def _numbered(table: pa.Table, starts: np.ndarray) -> pa.Table:
    """The cells with their `row_no` (from 1, in order) and `line_no` (from 1: a line
    begins at each of `starts`, `Reconciliation._line_starts()`)."""
    begins = np.zeros(table.num_rows, dtype=np.int64)
    begins[0] = 1
    begins[starts] = 1
    cells = table.append_column("row_no", pa.array(np.arange(1, table.num_rows + 1)))
    return cells.append_column("line_no", pa.array(np.cumsum(begins)))


def _fits(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether every line of `cells` is short enough for exact shares in 128 bits."""
    longest = con.execute(
        "SELECT max(us) FROM (SELECT sum(CAST(gpu_us AS HUGEINT)) AS us FROM cells "
        "GROUP BY line_no)"
    ).fetchall()[0][0]
    return bool(int(longest) < EXACT_LINE_US)


#: Cells a part at least: below this, a thread of its own costs more than it saves.
_PART_CELLS = 16_384
#: Parts at most: one a processor.
_PARTS = os.cpu_count() or 1


def _cuts(starts: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """Row ranges of about equal size, one a processor, each cut where a line begins (a
    line's shares and text are its own cells' alone)."""
    count = max(1, min(_PARTS, rows // _PART_CELLS))
    bounds = [0]
    for k in range(1, count):
        at = int(np.searchsorted(starts, rows * k // count))
        cut = int(starts[at]) if at < len(starts) else rows
        if cut > bounds[-1]:
            bounds.append(cut)
    bounds.append(rows)
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _in_threads(work: list[Callable[[], _T]]) -> list[_T]:
    """Each callable's result, in order, the first in this thread and the others in threads
    of their own (DuckDB lets go of the GIL while it works); a failure is raised here."""
    if len(work) == 1:
        return [work[0]()]
    with ThreadPoolExecutor(max_workers=len(work) - 1) as pool:
        later = [pool.submit(job) for job in work[1:]]
        first = work[0]()
        return [first, *(future.result() for future in later)]


def _lines_text(cells: pa.Table, sql: str) -> tuple[pa.ChunkedArray, pa.Table]:
    """The fragments of whole lines' cells in document order, and their exact shares."""
    with scratch() as con:
        con.register("cells", cells)
        con.register("labels", _labels())
        con.execute(f"CREATE TEMP TABLE shares AS {exact_shares_sql('cells')}")
        text = con.sql(sql).to_arrow_table().column("text")
        shares = con.table("shares").to_arrow_table()
    return text, shares


def _parts(
    before: list[bytes], column: pa.ChunkedArray, after: list[bytes]
) -> list[bytes | memoryview]:
    """`before`, a column's texts end to end (views of its data buffers: no Python object
    a text) and `after`."""
    parts: list[bytes | memoryview] = list(before)
    for chunk in column.chunks:
        if chunk.null_count:  # never made by the query; joined the plain way if it were
            parts.append("".join(text or "" for text in chunk.to_pylist()).encode())
            continue
        if not len(chunk):
            continue
        wide = pa.types.is_large_string(chunk.type)
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if wide else np.int32)
        first, last = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
        parts.append(memoryview(chunk.buffers()[2])[first:last])
    parts.extend(after)
    return parts


def _tenants(con: duckdb.DuckDBPyConnection, result: Reconciliation) -> dict[str, Any]:
    """The `tenants` member, as `Reconciliation.as_json` makes it, from aggregates."""
    tallies: dict[str, _Tally] = {}
    for tenant, minor in con.execute(_TENANT_MINOR).fetchall():
        tallies[tenant] = _Tally(minor=int(minor))
    for tenant, category, bearer, us, cents in con.execute(_TENANT_KEYS).fetchall():
        tallies[tenant].gpu_us[(category, bearer)] = int(us)
        tallies[tenant].cents[(category, bearer)] = int(cents)
    for tenant, state, us in con.execute(_TENANT_ACCEPTANCE).fetchall():
        tallies[tenant].acceptance[state] = int(us)
    for tenant in result.unbilled_us:
        tallies.setdefault(tenant, _Tally())
    placement = _placement(con, result)
    return {
        tenant: {
            "billed_gpu_seconds": gpu_seconds(tally.billed_us),
            "unbilled_gpu_seconds": gpu_seconds(result.unbilled_us.get(tenant, 0)),
            "categories": tally.categories(),
            "by_bearer": tally.by_bearer(),
            "productive_by_acceptance": tally.productive_by_acceptance(),
            "placement": placement.get(tenant, PlacementSums()).as_json(),
        }
        for tenant, tally in sorted(tallies.items())
    }


def _placement(con: duckdb.DuckDBPyConnection, result: Reconciliation) -> dict[str, PlacementSums]:
    """`Reconciliation.placement_states`' sums per tenant, from groups of lines."""
    per_tenant: dict[str, PlacementSums] = {}
    for (tenant, _currency), sums in _placement_groups(con, result).items():
        per_tenant[tenant] = per_tenant[tenant] + sums if tenant in per_tenant else sums
    return per_tenant


def _placement_groups(
    con: duckdb.DuckDBPyConnection, result: Reconciliation
) -> dict[tuple[str, str], PlacementSums]:
    """`Reconciliation.placement_sums`, from groups of lines (`con` holds the cells, their
    labels and exact shares)."""
    placement = result.placement
    if placement is None:
        placement = pa.table(
            {n: pa.array([], pa.string()) for n in ("tenant", "invoice_id", "line_id", "state")}
            | {"share": pa.array([], pa.string())}
        )
    con.register("placed_lines", placement)
    out: dict[tuple[str, str], PlacementSums] = {}
    for row in con.execute(_PLACEMENT_GROUPS).fetchall():
        tenant, currency, state, share, scale, places, _first, minor, us, billed, borne = row
        sums = out.setdefault((tenant, currency), PlacementSums(int(minor)))
        sums.gpu_us[state] += int(us)
        sums.amount[state] += Fraction(int(billed), 10 ** int(scale))
        if state == NOT_AS_SOLD:
            sums.claim += share_of(share) * Fraction(int(borne), 10 ** int(places))
    return dict(sorted(out.items()))


def placement_sums(result: Reconciliation) -> dict[tuple[str, str], PlacementSums] | None:
    """`Reconciliation.placement_sums()` column-wise (no Python object a cell), or None
    where it does not apply (no cells, cells not grouped by line, a line too long for
    exact shares: the caller then asks the reconciliation, which raises MoneyOverflow)."""
    starts = result._line_starts() if result.cell_count else None
    if starts is None:
        return None
    with scratch() as con:
        con.register("cells", _numbered(result.table, starts))
        if not _fits(con):
            return None
        con.register("labels", _labels())
        con.execute(f"CREATE TEMP TABLE shares AS {exact_shares_sql('cells')}")
        return _placement_groups(con, result)
