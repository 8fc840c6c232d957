"""Money follows time, exactly, in integers (RULES.md §Money).

A line's amount is read as an integer A (`amount_units`) at the data's largest decimal
scale s. A cell (line, label) is worth A × cell GPU-µs ÷ line GPU-µs units of 10^-s: in
minor units (cents) that is numerator ÷ divisor with numerator = A × cell × 10^m and
divisor = line × 10^s, kept as an exact floor (`floor_cents`) and `remainder`. Nothing is
rounded until an invoice (one tenant's invoice id in one currency) is reported: its exact
total is rounded half-even to the minor unit; each line is rounded half-even, and should
the lines then miss the invoice's total,
the cents go to (or come from) the lines with the largest rounding remainders. Within a
line, the cents that the cells' floors leave over go to the cells with the largest
remainders (ties: RULES.md's category order, which label codes follow). So cells add up
to their line, and lines to the invoice total, to the cent."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation

import duckdb

from schemas.errors import BadInput
from schemas.money import MINOR_UNITS, Money, minor_unit

__all__ = [
    "EXACT_PLACES",
    "MINOR_UNITS",
    "Money",
    "MoneyOverflow",
    "allocate",
    "decimal_text_sql",
    "exact_shares",
    "exact_shares_sql",
    "exact_sum",
    "exact_text",
    "longest_line_sql",
    "major_units",
    "minor_unit",
    "places_of",
    "round_minor",
]

_HUGEINT_BITS = 126  # headroom below DuckDB's signed 128-bit HUGEINT
_BIGINT_BITS = 62  # and below its signed 64-bit BIGINT


#: An exact share is written with at most this many decimal places (see `exact_shares`).
EXACT_PLACES = 18
#: Decimal digits enough for any amount the engine accepts (38) with EXACT_PLACES more.
_EXACT = Context(prec=100, rounding=ROUND_HALF_EVEN, traps=[Inexact, InvalidOperation])


class MoneyOverflow(BadInput, ValueError):
    """Amounts too large or too finely divided for exact integer arithmetic."""


def _amount_int(scale: int | str, column: str = "amount") -> str:
    """The decimal text as an integer of 10^-scale units, exactly (digits, not a cast);
    `scale` a number or an SQL expression (each row's own)."""
    return (
        f"CAST(split_part({column}, '.', 1) || rpad(split_part({column}, '.', 2), {scale}, "
        "'0') AS HUGEINT)"
    )


def _scale_and_type(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    """The data's largest decimal scale, and the narrowest DuckDB integer that holds every
    product and divisor exactly: BIGINT (fast, native) when the largest amount × the
    longest line × 10^4 fits in 62 bits, HUGEINT up to 126; beyond that exact arithmetic
    is out of reach."""
    row = con.execute("""
        SELECT coalesce(max(length(split_part(amount, '.', 2))), 0),
               coalesce(max(length(ltrim(split_part(amount, '.', 1), '+-'))), 0)
                   FROM lines""").fetchone()
    scale, whole_digits = (int(v) for v in (row or (0, 0)))
    if whole_digits + scale > 38:  # not even the amount itself fits in 128 bits
        raise MoneyOverflow(f"amounts of {scale} decimal places exceed exact 128-bit arithmetic")
    row = con.execute(f"""
        SELECT max(abs({_amount_int(scale)})),
               max(CAST(g_b AS HUGEINT) * (pe - ps)) FROM lines""").fetchone()
    biggest_amount, biggest_line = (int(v or 0) for v in (row or (0, 0)))
    bits = max(
        (biggest_amount * max(biggest_line, 1) * 10**4).bit_length(),
        (max(biggest_line, 1) * 10**scale).bit_length(),
    )
    if bits > _HUGEINT_BITS:
        raise MoneyOverflow(
            f"amounts of {scale} decimal places over lines this long exceed exact "
            "128-bit arithmetic"
        )
    if biggest_amount * 10**4 >= 2**_BIGINT_BITS * 10**scale:  # cells report cents as BIGINT
        raise MoneyOverflow(
            f"an amount of {Decimal(biggest_amount).scaleb(-scale, _EXACT):f} is too "
            "large to report "
            f"in minor units (at most {2**_BIGINT_BITS // 10**4:,} in any currency)"
        )
    return scale, "BIGINT" if bits <= _BIGINT_BITS else "HUGEINT"


def allocate(con: duckdb.DuckDBPyConnection) -> None:
    """Make `money`: each cell with its cents, adding up to its line's amount, the lines to the
    invoice's total."""
    scale, num = _scale_and_type(con)
    minor = (
        "CASE l.currency "
        + " ".join(f"WHEN '{c}' THEN {m}" for c, m in MINOR_UNITS.items())
        + " ELSE 2 END"
    )
    # 10^minor written as an integer literal per currency: a power in DuckDB is floating point
    per_unit = (
        "CASE l.currency "
        + " ".join(f"WHEN '{c}' THEN {10**m}" for c, m in MINOR_UNITS.items())
        + f" ELSE {10 ** minor_unit(None)} END"
    )
    con.execute(f"""
-- Each billed line's amount read as an integer once; cells and lines both start from it.
CREATE TABLE line_amounts AS
SELECT l.seq, l.tenant, l.invoice_id, l.currency, {minor} AS minor,
       CAST({per_unit} AS {num}) AS minor_per_unit,
       CAST({_amount_int(scale, "l.amount")} AS {num}) AS amount_units,
       CAST(l.g_b AS {num}) * (l.pe - l.ps) AS line_us
FROM lines l;  -- every line has a cell: its GPU-µs add up to g_b × (pe - ps),
               -- or it has no GPU time
""")
    totals = _invoice_totals(con, scale)
    con.execute(
        "CREATE TABLE invoice_cents (tenant VARCHAR, invoice_id VARCHAR, currency "
        "VARCHAR, cents HUGEINT)"
    )
    if totals:  # executemany refuses an empty list: a ledger with no billing line
        con.executemany("INSERT INTO invoice_cents VALUES (?, ?, ?, ?)", totals)
    con.execute(f"""
CREATE TABLE line_cents AS
WITH quotients AS (
    SELECT *, amount_units * minor_per_unit AS numerator, CAST({10**scale} AS {num}) AS divisor
        FROM line_amounts),
with_remainder AS (SELECT *, ((numerator % divisor) + divisor) % divisor AS remainder
    FROM quotients),
halfeven AS (
    SELECT seq, tenant, invoice_id, currency, (numerator - remainder) // divisor AS floor_cents,
           remainder, divisor,
           (2 * remainder > divisor
            OR (2 * remainder = divisor AND ((numerator - remainder) // divisor) % 2 <> 0))
                AS rounds_up
    FROM with_remainder)
SELECT *, floor_cents + CASE WHEN rounds_up THEN 1 ELSE 0 END AS rounded FROM halfeven;

CREATE TABLE line_total AS
WITH gap AS (
    SELECT i.tenant, i.invoice_id, i.currency, i.cents - sum(lc.rounded) AS missing_cents
    FROM invoice_cents i JOIN line_cents lc ON lc.tenant = i.tenant
     AND lc.invoice_id = i.invoice_id
     AND lc.currency IS NOT DISTINCT FROM i.currency
    GROUP BY i.tenant, i.invoice_id, i.currency, i.cents),
ranked AS (  -- only the invoices whose rounded lines miss their total need ranking
    -- every line has the same divisor (10^scale), so remainders compare exactly as integers
    SELECT lc.*, gap.missing_cents,
           row_number() OVER (PARTITION BY lc.tenant, lc.invoice_id, lc.currency, lc.rounds_up
                              ORDER BY CASE WHEN lc.rounds_up THEN lc.remainder
                                  ELSE -lc.remainder END, lc.seq) AS rank
    FROM line_cents lc JOIN gap ON gap.tenant = lc.tenant AND gap.invoice_id = lc.invoice_id
     AND gap.currency IS NOT DISTINCT FROM lc.currency
    WHERE gap.missing_cents <> 0)
SELECT seq, rounded + CASE WHEN missing_cents > 0 AND NOT rounds_up
    AND rank <= missing_cents THEN 1
                           WHEN missing_cents < 0 AND rounds_up AND rank <= -missing_cents THEN -1
                               ELSE 0 END AS cents
FROM ranked
UNION ALL
SELECT lc.seq, lc.rounded FROM line_cents lc JOIN gap
  ON gap.tenant = lc.tenant AND gap.invoice_id = lc.invoice_id
      AND gap.currency IS NOT DISTINCT FROM lc.currency
WHERE gap.missing_cents = 0;

-- Each cell's exact share numerator ÷ divisor as a floor and a remainder; the cents the
-- floors leave over in a line go to its cells with the largest remainders. Every cell of
-- a line has the same divisor (a line of no GPU time has one cell, of 0 GPU-µs, which
-- takes its whole amount), so remainders compare exactly as integers.
CREATE TABLE money AS
WITH quotients AS (
    SELECT c.seq, c.label, c.gpu_us, a.minor, t.cents AS line_cents,
           a.amount_units * CASE WHEN c.gpu_us = 0 THEN CAST(1 AS {num})
                          ELSE CAST(c.gpu_us AS {num}) END
                          * a.minor_per_unit AS numerator,
           CASE WHEN c.gpu_us = 0 THEN CAST(1 AS {num}) ELSE a.line_us END
               * CAST({10**scale} AS {num}) AS divisor
    FROM cells c JOIN line_amounts a ON a.seq = c.seq JOIN line_total t ON t.seq = c.seq),
floored AS (
    SELECT *, (numerator - remainder) // divisor AS floor_cents
    FROM (SELECT *, ((numerator % divisor) + divisor) % divisor AS remainder FROM quotients)),
ranked AS (
    SELECT *, row_number() OVER w AS rank,
           sum(floor_cents) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING
               AND UNBOUNDED FOLLOWING) AS floors
    -- ties: the category order, which the label codes follow
    FROM floored WINDOW w AS (PARTITION BY seq ORDER BY remainder DESC, label))
SELECT seq, label, gpu_us, minor, floor_cents + CASE WHEN rank <= line_cents - floors THEN 1
    ELSE 0 END AS cents
FROM ranked;
""")


def exact_shares_sql(cells: str) -> str:
    """SQL: `exact_shares` column-wise. `cells` is a relation with row_no, tenant,
    invoice_id, line_id, label, gpu_us, minor and billed_amount; the query gives each row_no
    its exact share as `share_units` at `share_places` decimals, and the line's
    `exact_places` (at least the billed amount's places and the minor unit).

    The places a share needs are found per cell from its reduced denominator (the line's
    GPU-µs ÷ gcd with amount × cell GPU-µs): it terminates at k places when it divides
    10^k. At the line's places the floors and remainders are split as q0 × 10^k +
    (r0 × 10^k) ÷ line, so no product is wider than line × 10^EXACT_PLACES; the units the
    floors leave go to the largest remainders, ties by label (the order `exact_shares`
    sorts the cells in), the same integer ranking as `allocate`'s cents."""
    tens = "CAST([" + ", ".join(str(10**k) for k in range(EXACT_PLACES + 1)) + "] AS HUGEINT[])"
    terminates = f"WHEN {10**EXACT_PLACES} % d <> 0 THEN {EXACT_PLACES + 1} " + " ".join(
        f"WHEN {10**k} % d = 0 THEN {k}" for k in range(EXACT_PLACES + 1)
    )
    return f"""
WITH lines AS (
    SELECT tenant, invoice_id, line_id, arg_min(billed_amount, label) AS billed,
           arg_min(minor, label) AS minor, sum(CAST(gpu_us AS HUGEINT)) AS total,
           row_number() OVER () AS line_no  -- any distinct integer: windows partition by it fast
    FROM {cells} GROUP BY tenant, invoice_id, line_id),
line_units AS (
    SELECT tenant, invoice_id, line_id, line_no, minor, total, scale,
        {_amount_int("scale", "billed")} AS units, starts_with(billed, '-') AS negative
    FROM (SELECT *, CAST(length(split_part(billed, '.', 2)) AS INTEGER) AS scale FROM lines)),
reduced AS (
    SELECT c.row_no, c.label, CAST(c.gpu_us AS HUGEINT) AS w, l.line_no, l.negative, l.minor,
           l.total, l.scale, l.units,
           CASE WHEN l.total = 0 THEN CAST(1 AS HUGEINT)
                ELSE l.total // gcd(abs(l.units * c.gpu_us), l.total) END AS d
    FROM {cells} c JOIN line_units l
      ON l.tenant = c.tenant AND l.invoice_id = c.invoice_id AND l.line_id = c.line_id),
needs AS (SELECT *, CASE {terminates} END AS need FROM reduced),
placed AS (
    SELECT *, CASE WHEN total = 0 THEN scale
                   ELSE greatest(scale, minor, least(max(need) OVER by_line + scale,
                       {EXACT_PLACES})) END AS places
    FROM needs WINDOW by_line AS (PARTITION BY line_no)),
split AS (
    SELECT *, ((units * w % total) + total) % total AS r0, {tens}[places - scale + 1] AS ten_k
    FROM placed WHERE total <> 0),
floored AS (
    SELECT *, (units * w - r0) // total * ten_k + r0 * ten_k // total AS floor_units,
        r0 * ten_k % total AS remainder
    FROM split),
ranked AS (
    SELECT *, row_number() OVER by_line AS rank,
           units * ten_k - sum(floor_units) OVER (by_line ROWS BETWEEN UNBOUNDED PRECEDING
               AND UNBOUNDED FOLLOWING)
               AS leftover
    FROM floored WINDOW by_line AS (PARTITION BY line_no ORDER BY remainder DESC, label))
SELECT row_no, floor_units + CASE WHEN rank <= leftover THEN 1 ELSE 0 END AS share_units,
       places AS share_places,
       greatest(minor, scale) AS exact_places, false AS negative_zero
FROM ranked
UNION ALL  -- a line of no GPU-µs (money-only): its first cell takes the whole amount, as billed
SELECT row_no, CASE WHEN rank = 1 THEN units ELSE 0 END, places, greatest(minor, scale),
       rank = 1 AND units = 0 AND negative
FROM (SELECT *, row_number() OVER (PARTITION BY line_no ORDER BY label) AS rank
      FROM placed WHERE total = 0)
"""


def longest_line_sql(cells: str) -> str:
    """SQL: the most GPU-µs of any one line in `cells` (`exact_shares_sql` needs it below
    `EXACT_LINE_US`)."""
    return (
        "SELECT coalesce(max(total), 0) FROM (SELECT sum(CAST(gpu_us AS HUGEINT)) AS total "
        f"FROM {cells} GROUP BY tenant, invoice_id, line_id)"
    )


#: The longest line whose exact shares `exact_shares_sql` works out within 128 bits.
EXACT_LINE_US = 2**_HUGEINT_BITS // 10**EXACT_PLACES


def decimal_text_sql(units: str, places: str, least: str, negative_zero: str = "false") -> str:
    """SQL: integer `units` of 10^-places as decimal text with at least `least` places and
    more only where it has them: `exact_text` (and `str(Money)` when least = places)."""
    digits = (
        f"lpad(CAST(abs({units}) AS VARCHAR), "
        f"CAST(greatest(length(CAST(abs({units}) AS VARCHAR)), {places} + 1) AS INTEGER), '0')"
    )
    whole = f"left({digits}, length({digits}) - {places})"
    trimmed = f"rtrim(right({digits}, {places}), '0')"
    fraction = (
        f"CASE WHEN length({trimmed}) >= {least} THEN {trimmed} ELSE rpad({trimmed}, "
        f"CAST({least} AS INTEGER), '0') END"
    )
    sign = f"CASE WHEN {units} < 0 OR {negative_zero} THEN '-' ELSE '' END"
    return (
        f"{sign} || {whole} || CASE WHEN {least} = 0 AND {trimmed} = '' THEN '' ELSE '.' || "
        f"{fraction} END"
    )


def _invoice_totals(
    con: duckdb.DuckDBPyConnection, scale: int
) -> list[tuple[str, str, str | None, int]]:
    """Each invoice's exact total rounded half-even to its currency's minor unit. An invoice
    is one tenant's: two tenants' invoices of one id never share a cent (a tenant's figures
    rest on its own data only)."""
    rows = con.execute("""
        SELECT tenant, invoice_id, currency, CAST(sum(amount_units) AS VARCHAR)
        FROM line_amounts GROUP BY tenant, invoice_id, currency""").fetchall()
    out = []
    for tenant, invoice_id, currency, total in rows:
        out.append(
            (
                tenant,
                invoice_id,
                currency,
                round_minor(Decimal(int(total)).scaleb(-scale, _EXACT), minor_unit(currency)),
            )
        )
    return out


def major_units(cents: int, minor: int) -> Decimal:
    """Integer minor units as an exact Decimal of major units (a scaleb would round to the
    default context's 28 digits)."""
    return Decimal(f"{int(cents)}E-{minor}")


def places_of(text: str) -> int:
    """The decimal places an amount was written with ("0.735": 3, "12": 0)."""
    exponent = Decimal(text).as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def exact_shares(billed: str, weights: Sequence[int], minor: int) -> list[Decimal]:
    """A line's billed amount split in proportion to `weights` (its cells' GPU-µs, in
    category order; a lone money-only cell of weight 0 takes all of it), in exact decimals.

    Each share is written at the fewest places (at least the billed amount's own and the
    currency's minor unit) at which every share of the line is exact. A share with no
    finite decimal expansion within EXACT_PLACES (a third) is floored there, and the
    10^-EXACT_PLACES units the floors leave go to the largest remainders (ties: the order
    given), so the shares always add up to the billed amount exactly."""
    total = sum(weights)
    if total == 0:
        return [Decimal(billed)] + [Decimal(0)] * (len(weights) - 1)
    scale = places_of(billed)
    units = int(Decimal(billed).scaleb(scale, _EXACT))  # the amount in 10^-scale units, exactly
    needed = max(_places_needed(units * w, total) + scale for w in weights)
    places = max(scale, minor, min(needed, EXACT_PLACES))
    x = [units * w * 10 ** (places - scale) for w in weights]
    floors = [v // total for v in x]
    leftover = units * 10 ** (places - scale) - sum(floors)
    by_remainder = sorted(range(len(x)), key=lambda i: (-(x[i] - floors[i] * total), i))
    for i in by_remainder[:leftover]:
        floors[i] += 1
    return [Decimal(f"{q}E-{places}") for q in floors]


def _places_needed(numerator: int, denominator: int) -> int:
    """Decimal places of numerator ÷ denominator when it terminates, else a number past
    EXACT_PLACES (the denominator then has a factor other than 2 and 5)."""
    from math import gcd

    rest = denominator // gcd(numerator, denominator)
    twos = fives = 0
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    return max(twos, fives) if rest == 1 else EXACT_PLACES + 1


def exact_sum(values: Iterable[Decimal]) -> Decimal:
    """Decimals added with no rounding (the default context keeps only 28 digits)."""
    total = Decimal(0)
    for value in values:
        total = _EXACT.add(total, value)
    return total


def exact_text(value: Decimal, places: int) -> str:
    """An exact amount with at least `places` decimals, and more only where it has them."""
    trimmed = _EXACT.normalize(value) if value else Decimal(0)
    exponent = trimmed.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > places:
        return format(trimmed, "f")
    return format(_EXACT.quantize(value, Decimal(1).scaleb(-places)), "f")


def round_minor(value: Decimal, minor: int) -> int:
    """An exact amount in minor units, rounded half-even (RULES.md §Money)."""
    return int(_EXACT.scaleb(value, minor).to_integral_value(ROUND_HALF_EVEN))
