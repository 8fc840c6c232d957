"""Money follows time, exactly, in integers (RULES.md §Money).

A line's amount is read as an integer A at the data's largest decimal scale s. A cell
(line, label) is worth A × cell GPU-µs ÷ line GPU-µs units of 10^-s: in minor units
(cents) that is x ÷ d with x = A × cell × 10^m and d = line × 10^s, kept as an exact
floor q and remainder r. Nothing is rounded until an invoice is reported: its exact total
is rounded half-even to the minor unit; each line is rounded half-even, and should the
lines then miss the invoice's total, the cents go to (or come from) the lines with the
largest rounding remainders. Within a line, the cents that the cells' floors leave over go
to the cells with the largest remainders (ties: RULES.md's category order). So cells add
up to their line, and lines to the invoice total, to the cent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation

import duckdb

#: ISO 4217 minor units that are not 2.
MINOR_UNITS = {
    "BHD": 3, "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "IQD": 3, "ISK": 0, "JOD": 3, "JPY": 0,
    "KMF": 0, "KRW": 0, "KWD": 3, "LYD": 3, "OMR": 3, "PYG": 0, "RWF": 0, "TND": 3, "UGX": 0,
    "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0, "CLF": 4, "UYW": 4,
}
_HUGEINT_BITS = 126  # headroom below DuckDB's signed 128-bit HUGEINT
_BIGINT_BITS = 62  # and below its signed 64-bit BIGINT


#: Ties in the rounding go in RULES.md's category order: unallocated, double_billed, the
#: span labels by priority, idle_reserved, idle_unexplained, money_only.
#: (The span labels 1–11 rank 2–12, so idle_reserved, label 0, ranks 13.)
_RANK_APART = {21: 0, 20: 1, 0: 13, 12: 14, 22: 15}


def category_rank(label: int) -> int:
    """A label's place in RULES.md's category order (rounding ties, exact shares' ties)."""
    return _RANK_APART.get(label, 1 + label)


_CATEGORY_RANK = ("CASE f.label " + " ".join(f"WHEN {k} THEN {v}" for k, v in _RANK_APART.items())
                  + " ELSE 1 + f.label END")

#: An exact share is written with at most this many decimal places (see `exact_shares`).
EXACT_PLACES = 18
#: Decimal digits enough for any amount the engine accepts (38) with EXACT_PLACES more.
_EXACT = Context(prec=100, rounding=ROUND_HALF_EVEN, traps=[Inexact, InvalidOperation])


class MoneyOverflow(ValueError):
    """Amounts too large or too finely divided for exact integer arithmetic."""


def minor_unit(currency: str | None) -> int:
    return MINOR_UNITS.get(currency or "", 2)


def _amount_int(scale: int, column: str = "amount") -> str:
    """The decimal text as an integer of 10^-scale units, exactly (digits, not a cast)."""
    return (f"CAST(split_part({column}, '.', 1) || rpad(split_part({column}, '.', 2), {scale}, '0') AS HUGEINT)")


def _scale_and_type(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    """The data's largest decimal scale, and the narrowest DuckDB integer that holds every
    product and divisor exactly: BIGINT (fast, native) when the largest amount × the
    longest line × 10^4 fits in 62 bits, HUGEINT up to 126; beyond that exact arithmetic
    is out of reach."""
    row = con.execute("""
        SELECT coalesce(max(length(split_part(amount, '.', 2))), 0),
               coalesce(max(length(ltrim(split_part(amount, '.', 1), '+-'))), 0) FROM lines""").fetchone()
    scale, whole_digits = (int(v) for v in (row or (0, 0)))
    if whole_digits + scale > 38:  # not even the amount itself fits in 128 bits
        raise MoneyOverflow(f"amounts of {scale} decimal places exceed exact 128-bit arithmetic")
    row = con.execute(f"""
        SELECT max(abs({_amount_int(scale)})),
               max(CAST(g_b AS HUGEINT) * (pe - ps)) FROM lines""").fetchone()
    biggest_amount, biggest_line = (int(v or 0) for v in (row or (0, 0)))
    bits = max((biggest_amount * max(biggest_line, 1) * 10**4).bit_length(),
               (max(biggest_line, 1) * 10**scale).bit_length())
    if bits > _HUGEINT_BITS:
        raise MoneyOverflow(f"amounts of {scale} decimal places over lines this long exceed exact 128-bit arithmetic")
    if biggest_amount * 10**4 >= 2**_BIGINT_BITS * 10**scale:  # cells report cents as BIGINT
        raise MoneyOverflow(f"an amount of {Decimal(biggest_amount).scaleb(-scale, _EXACT):f} is too large to report "
                            f"in minor units (at most {2**_BIGINT_BITS // 10**4:,} in any currency)")
    return scale, "BIGINT" if bits <= _BIGINT_BITS else "HUGEINT"


def allocate(con: duckdb.DuckDBPyConnection) -> None:
    """Make `money`: each cell with its cents, adding up to its line's amount, the lines to the invoice's total."""
    scale, num = _scale_and_type(con)
    minor = "CASE l.currency " + " ".join(f"WHEN '{c}' THEN {m}" for c, m in MINOR_UNITS.items()) + " ELSE 2 END"
    con.execute(f"""
-- Each billed line's amount read as an integer once; cells and lines both start from it.
CREATE TABLE line_amounts AS
SELECT l.seq, l.invoice_id, l.currency, {minor} AS minor, CAST({_amount_int(scale, "l.amount")} AS {num}) AS a_int,
       CAST(l.g_b AS {num}) * (l.pe - l.ps) AS line_us
FROM lines l;  -- every line has a cell: its GPU-µs add up to g_b × (pe - ps), or it is money-only
""")
    totals = _invoice_totals(con, scale)
    con.execute("CREATE TABLE invoice_cents (invoice_id VARCHAR, currency VARCHAR, cents HUGEINT)")
    if totals:  # executemany refuses an empty list: a ledger with no billing line
        con.executemany("INSERT INTO invoice_cents VALUES (?, ?, ?)", totals)
    con.execute(f"""
CREATE TABLE line_cents AS
WITH xd AS (SELECT *, a_int * CAST(pow(10, minor) AS {num}) AS x, CAST({10 ** scale} AS {num}) AS d FROM line_amounts),
rem AS (SELECT *, ((x % d) + d) % d AS r FROM xd),
halfeven AS (
    SELECT seq, invoice_id, currency, (x - r) // d AS q, r, d,
           (2 * r > d OR (2 * r = d AND ((x - r) // d) % 2 <> 0)) AS up
    FROM rem)
SELECT *, q + CASE WHEN up THEN 1 ELSE 0 END AS rounded FROM halfeven;

CREATE TABLE line_total AS
WITH gap AS (
    SELECT i.invoice_id, i.currency, i.cents - sum(lc.rounded) AS k
    FROM invoice_cents i JOIN line_cents lc ON lc.invoice_id = i.invoice_id AND lc.currency IS NOT DISTINCT FROM i.currency
    GROUP BY i.invoice_id, i.currency, i.cents),
ranked AS (  -- only the invoices whose rounded lines miss their total need ranking
    -- every line has the same d (10^scale), so remainders compare exactly as integers
    SELECT lc.*, g.k,
           row_number() OVER (PARTITION BY lc.invoice_id, lc.currency, lc.up
                              ORDER BY CASE WHEN lc.up THEN lc.r ELSE -lc.r END, lc.seq) AS rank
    FROM line_cents lc JOIN gap g ON g.invoice_id = lc.invoice_id AND g.currency IS NOT DISTINCT FROM lc.currency
    WHERE g.k <> 0)
SELECT seq, rounded + CASE WHEN k > 0 AND NOT up AND rank <= k THEN 1
                           WHEN k < 0 AND up AND rank <= -k THEN -1 ELSE 0 END AS cents
FROM ranked
UNION ALL
SELECT lc.seq, lc.rounded FROM line_cents lc JOIN gap g
  ON g.invoice_id = lc.invoice_id AND g.currency IS NOT DISTINCT FROM lc.currency
WHERE g.k = 0;

-- Each cell's exact share x ÷ d as a floor q and remainder r; the cents the floors leave
-- over in a line go to its cells with the largest remainders. Every cell of a line has the
-- same d (a money-only line has one cell), so remainders compare exactly as integers.
CREATE TABLE money AS
WITH xd AS (
    SELECT c.seq, c.label, c.gpu_us, a.minor, t.cents AS line_cents,
           a.a_int * CASE WHEN c.label = 22 THEN CAST(1 AS {num}) ELSE CAST(c.gpu_us AS {num}) END
                   * CAST(pow(10, a.minor) AS {num}) AS x,
           CASE WHEN c.label = 22 THEN CAST(1 AS {num}) ELSE a.line_us END * CAST({10 ** scale} AS {num}) AS d
    FROM cells c JOIN line_amounts a ON a.seq = c.seq JOIN line_total t ON t.seq = c.seq),
floored AS (SELECT *, (x - r) // d AS q FROM (SELECT *, ((x % d) + d) % d AS r FROM xd)),
ranked AS (
    SELECT *, row_number() OVER w AS rank,
           sum(q) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS floors
    FROM floored WINDOW w AS (PARTITION BY seq ORDER BY r DESC, {_CATEGORY_RANK.replace("f.", "")}))
SELECT seq, label, gpu_us, minor, q + CASE WHEN rank <= line_cents - floors THEN 1 ELSE 0 END AS cents FROM ranked;
""")


def _invoice_totals(con: duckdb.DuckDBPyConnection, scale: int) -> list[tuple[str, str | None, int]]:
    """Each invoice's exact total rounded half-even to its currency's minor unit."""
    rows = con.execute("""
        SELECT invoice_id, currency, CAST(sum(a_int) AS VARCHAR)
        FROM line_amounts GROUP BY invoice_id, currency""").fetchall()
    out = []
    for invoice_id, currency, total in rows:
        out.append((invoice_id, currency, round_minor(Decimal(int(total)).scaleb(-scale, _EXACT), minor_unit(currency))))
    return out


def format_minor(cents: int, minor: int) -> str:
    """Integer minor units as a decimal string with exactly `minor` places."""
    return format(Decimal(cents).scaleb(-minor), f".{minor}f")


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
