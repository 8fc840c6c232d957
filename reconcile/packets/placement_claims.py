"""What a dispute claims for placement not as sold (RULES.md 13), line by line.

Besides its categories, each line of an invoice has a placement state. For each line whose
state is `not_as_sold`, the dispute carries a placement claim: the line, its allocation,
the placement_credit_share of the terms in force at its period_start, the line's
customer-borne amount (exact) and the claim, placement_credit_share x that amount (exact,
and rounded half-even to the minor unit as reported). The claim's rule is the engine's
own (`reconcile.engine.result.placement_claim`), so the reconciliation's `placement`,
the packet and `verify-packet` cannot differ in it.

A placement claim cites its billing line, the allocation's grant, the topology
captures the state was judged from (the latest `placement.observed` of each node of the
allocation, RULES.md 13) and the `policy.terms` that gave the share (none: the default).
A claim of share 0 is kept: the placement was still not as sold, and the letter says so.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any

from reconcile.engine.money import exact_text
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.placement import DEFAULT_SHARE, NOT_AS_SOLD, share_of
from reconcile.engine.result import Reconciliation, customer_borne, placement_claim
from schemas.money import Money

#: (tenant, allocation, seq) of the captures a state was judged from: the latest of each node
CAPTURE_SEQS = """
SELECT tenant, data->>'allocation_id' AS aid, seq FROM evidence
WHERE type = 'placement.observed' AND data->>'allocation_id' IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY tenant, data->>'allocation_id', data->>'node'
                           ORDER BY t DESC, seq DESC) = 1
"""

#: each line of the invoice (after corrections): its seq, its grant's and its terms' seqs
LINE_SEQS = """
SELECT l.tenant, l.line_id, l.seq,
       (SELECT min_by(g.seq, (g.t, g.seq)) FROM ev_rest g WHERE g.type = 'allocation.granted'
          AND g.tenant = l.tenant AND g.allocation_id = l.aid),
       (SELECT max_by(tm.seq, (tm.t, tm.seq)) FROM ev_rest tm WHERE tm.type = 'policy.terms'
          AND tm.tenant = l.tenant AND tm.t <= l.ps)
FROM lines l WHERE l.invoice_id = $invoice
"""


def _fraction_text(value: Fraction, places: int) -> str:
    """An exact amount as text of at least `places` places: a share given in decimals
    times decimal amounts is a terminating decimal, so nothing is rounded here."""
    shift = 0
    while (value * 10**shift).denominator != 1:
        shift += 1
    return exact_text(Decimal(int(value * 10**shift)).scaleb(-shift), places)


def placement_claims(pipe: Pipeline, invoice: str) -> list[dict[str, Any]]:
    """The invoice's placement claims, in ledger order of their lines, each as the packet
    holds it (docs/dispute-letter.md)."""
    recon: Reconciliation = pipe.reconciliation(invoice)
    con = pipe.need("placement")
    captures: dict[tuple[str, str], list[int]] = defaultdict(list)
    for tenant, aid, seq in con.execute(CAPTURE_SEQS).fetchall():
        captures[(tenant, aid)].append(int(seq))
    seqs = {
        (tenant, line_id): (int(seq), grant, terms)
        for tenant, line_id, seq, grant, terms in con.execute(
            LINE_SEQS, {"invoice": invoice}
        ).fetchall()
    }
    lines = recon.lines()
    out: list[tuple[int, dict[str, Any]]] = []
    for key, (state, share) in recon.placed().items():
        if state != NOT_AS_SOLD or key not in lines:
            continue
        first, tally = lines[key]
        borne = customer_borne(tally.exact)
        claim = placement_claim(share, borne)
        line_seq, grant, terms = seqs[(first.tenant, first.line_id)]
        cites = {line_seq, *captures.get((first.tenant, first.allocation_id or ""), [])}
        cites |= {int(s) for s in (grant, terms) if s is not None}
        places = tally.exact_places
        out.append(
            (
                line_seq,
                {
                    "line_id": first.line_id,
                    "allocation_id": first.allocation_id,
                    "state": state,
                    "share": _share_text(share),
                    "customer_amount": _fraction_text(borne, places),
                    "amount": str(Money.of(round(claim * 10**first.minor), first.minor)),
                    "amount_exact": _fraction_text(claim, places),
                    "currency": first.currency,
                    "cites": sorted(cites),
                },
            )
        )
    return [claim for _seq, claim in sorted(out, key=lambda item: item[0])]


def _share_text(share: str | None) -> str:
    """The share the claim used, as text: the terms' own when they give one it reads,
    else the default's."""
    if share is None:
        return str(DEFAULT_SHARE)
    try:
        given = Fraction(share)
    except (ValueError, ZeroDivisionError):
        return str(DEFAULT_SHARE)
    return share if given == share_of(share) else str(DEFAULT_SHARE)
