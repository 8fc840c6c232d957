"""The provider's answers to a dispute's findings (docs/answers.md).

A finding is one claim of a dispute (reconcile/packets/claims.py): a line of the invoice and a
category the customer does not owe. The provider answers it with a `dispute.answer` event
in the tenant's chain (schemas/events.py), signed with its key:

- `accepted`: the finding's amount is credited;
- `rejected`: with a reason, and the seqs of the ledger entries it cites as evidence;
- `partly`: with the amount accepted, more than 0 and less than the finding's.

Rules, in the order they apply:
1. An answer records the finding's figures as answered (`finding_amount`,
   `finding_gpu_seconds`, `currency`). Answering a finding that is not on the invoice now,
   or citing an entry the customer's packet would not carry, is refused.
2. Re-running an answer whose state, reason, evidence, amount and figures are those of the
   finding's latest answer appends nothing. Any other answer is the next `revision`.
3. Per finding, the answer with the highest seq is its answer; earlier ones are
   `superseded`. That answer is `stale` when the finding is gone or its figures differ from
   the figures answered (new entries changed them): the finding is open again.
4. The signature is Ed25519 over `SIGNED_PREFIX` and the canonical JSON (RFC 8785) of the
   event's `data` without `signature`, written as the signed notes write one (base64 of key
   id ‖ signature); `signer` names the key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from ledger import Appender, Store, read
from ledger.note import Signer, Verifier
from reconcile.packets.claims import finding_figures
from reconcile.reports.finance_page import ANSWER_TYPE, Answers, FindingAnswer
from schemas import Accepted, Origin, canonical, format_utc, validate_event
from schemas.errors import BadInput
from schemas.records import field_path

SIGNED_PREFIX = b"gpuledger dispute.answer v1\n"
STATES = ("accepted", "rejected", "partly")
#: What rule 2 compares: an answer that repeats these is the same answer.
SAME_ANSWER = (
    "state",
    "reason",
    "evidence",
    "amount",
    "currency",
    "finding_amount",
    "finding_gpu_seconds",
)


class AnswerFileError(BadInput, ValueError):
    """An answer file that cannot be read, or asks for what cannot be answered; the message
    names the file and the place in it."""


@dataclass(frozen=True)
class Asked:
    """One answer as the provider's file gives it."""

    line_id: str
    category: str
    state: str
    reason: str | None = None
    evidence: tuple[int, ...] | None = None
    amount: str | None = None


@dataclass
class Recorded:
    """What `record_answers` did."""

    appended: int = 0
    unchanged: int = 0
    states: dict[str, int] = field(default_factory=dict)


def finding_key(line_id: str, category: str) -> str:
    """How a finding is named in messages and files: `LINE/category`."""
    return f"{line_id}/{category}"


# -- signing --------------------------------------------------------------------------


def signed_bytes(data: dict[str, Any]) -> bytes:
    """What the signature covers (rule 4)."""
    return SIGNED_PREFIX + canonical({k: v for k, v in data.items() if k != "signature"})


def sign(data: dict[str, Any], signer: Signer) -> str:
    blob = signer.verifier.id + signer.raw_sign(signed_bytes(data))
    return base64.b64encode(blob).decode()


def signature_problem(data: dict[str, Any], verifier: Verifier) -> str | None:
    """None when `data` carries `verifier`'s valid signature; else what is wrong."""
    if data.get("signer") != verifier.name:
        return f"signed by {data.get('signer')!r}, not by {verifier.name!r}"
    try:
        blob = base64.b64decode(str(data.get("signature", "")), validate=True)
    except ValueError:
        return "the signature is not base64"
    if blob[:4] != verifier.id or len(blob) != 68:
        return f"the signature is not by the key {verifier.name} (key id {verifier.id.hex()})"
    try:
        Ed25519PublicKey.from_public_bytes(verifier.public).verify(blob[4:], signed_bytes(data))
    except InvalidSignature:
        return f"the signature by {verifier.name} does not match the answer"
    return None


# -- the answer file ------------------------------------------------------------------


def read_answer_file(path: Path) -> list[Asked]:
    """The answers in `path`: `{"answers": [{"line_id", "category", "state", ...}]}`."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise AnswerFileError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AnswerFileError(f"{path}: not JSON text: {exc}") from None
    items = value.get("answers") if isinstance(value, dict) else None
    if not isinstance(items, list) or not items:
        raise AnswerFileError(f"{path}: answers: expected a non-empty array of answers")
    return [_asked(path, i, item) for i, item in enumerate(items)]


def _asked(path: Path, index: int, item: Any) -> Asked:
    where = f"{path}: answers[{index}]"
    if not isinstance(item, dict):
        raise AnswerFileError(f"{where}: expected an object")
    allowed = {"line_id", "category", "state", "reason", "evidence", "amount"}
    for name in item:
        if name not in allowed:
            raise AnswerFileError(f"{where}.{name}: not a member of an answer")
    for name in ("line_id", "category", "state"):
        if not isinstance(item.get(name), str) or not item[name]:
            raise AnswerFileError(f"{where}.{name}: expected a non-empty string")
    if item["state"] not in STATES:
        raise AnswerFileError(
            f"{where}.state: {item['state']!r} is not one of {', '.join(STATES)}"
        )
    evidence = item.get("evidence")
    if evidence is not None and (
        not isinstance(evidence, list)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in evidence)
    ):
        raise AnswerFileError(f"{where}.evidence: expected an array of ledger seqs")
    amount = item.get("amount")
    if amount is not None and not isinstance(amount, str):
        raise AnswerFileError(f'{where}.amount: expected a decimal string such as "1.20"')
    reason = item.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise AnswerFileError(f"{where}.reason: expected a string")
    return Asked(
        item["line_id"],
        item["category"],
        item["state"],
        reason,
        None if evidence is None else tuple(sorted(set(evidence))),
        amount,
    )


# -- recording ------------------------------------------------------------------------


def record_answers(
    store: Store,
    tenant: str,
    invoice: str,
    signer: Signer,
    asked: Sequence[Asked],
    origin: str = "answers",
    now: datetime | None = None,
) -> Recorded:
    """Append the provider's signed answers to the findings of `invoice` (rules 1 and 2)."""
    from reconcile.packets.dispute import current_findings

    size, claims, carried = current_findings(store, tenant, invoice)
    by_key = {(c["line_id"], c["category"]): c for c in claims}
    latest = _latest(_answer_events(read.entries(store, tenant=tenant, type=ANSWER_TYPE)), invoice)
    moment = now or datetime.now(timezone.utc)
    done = Recorded()
    records = []
    for index, wanted in enumerate(asked):
        where = f"{origin}: answers[{index}]"
        claim = by_key.get((wanted.line_id, wanted.category))
        if claim is None:
            raise AnswerFileError(
                f"{where}: invoice {invoice!r} of {tenant!r} has no finding "
                f"{finding_key(wanted.line_id, wanted.category)} (up to seq {size})"
            )
        for seq in wanted.evidence or ():
            if seq not in carried:
                raise AnswerFileError(
                    f"{where}.evidence: seq {seq} is not an entry the customer's packet "
                    f"carries (its own entries and its allocations' fleet entries, up to {size})"
                )
        data = _data(tenant, invoice, wanted, claim)
        before = latest.get((wanted.line_id, wanted.category))
        done.states[wanted.state] = done.states.get(wanted.state, 0) + 1
        if before is not None and _same(before[1], data):
            done.unchanged += 1
            continue
        data["revision"] = 1 if before is None else int(before[1]["revision"]) + 1
        data["signer"] = signer.name
        data["signature"] = sign(data, signer)
        records.append(_record(data, signer, moment, where))
        latest[(wanted.line_id, wanted.category)] = (0, data)
    if records:
        result = Appender(store).append(records)
        done.appended = result.appended
    return done


def _data(tenant: str, invoice: str, wanted: Asked, claim: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "tenant": tenant,
        "invoice_id": invoice,
        "line_id": wanted.line_id,
        "category": wanted.category,
        "state": wanted.state,
    }
    if wanted.reason is not None:
        data["reason"] = wanted.reason
    if wanted.evidence is not None:
        data["evidence"] = list(wanted.evidence)
    if wanted.amount is not None:
        data["amount"] = wanted.amount
    if claim["currency"]:
        data["currency"] = claim["currency"]
    data["finding_amount"] = claim["amount"]
    data["finding_gpu_seconds"] = str(claim["gpu_seconds"])
    return data


def _same(before: dict[str, Any], data: dict[str, Any]) -> bool:
    def norm(value: Any, name: str) -> Any:
        if value is not None and name in ("amount", "finding_amount", "finding_gpu_seconds"):
            return Decimal(str(value))
        return value

    return all(norm(before.get(k), k) == norm(data.get(k), k) for k in SAME_ANSWER)


def _record(data: dict[str, Any], signer: Signer, moment: datetime, where: str) -> Accepted:
    event = {
        "specversion": "1.0",
        "id": f"answer/{data['invoice_id']}/{data['line_id']}/{data['category']}/"
        f"{data['revision']}",
        "source": f"gpuledger-answer://{signer.name}",
        "type": ANSWER_TYPE,
        "time": format_utc(moment),
        "data": data,
    }
    try:
        return Accepted.of(validate_event(event, now=moment), Origin(where, 0))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise AnswerFileError(
            f"{where}: {field_path(tuple(error['loc']))}: "
            f"{error['msg'].removeprefix('Value error, ')}"
        ) from None


# -- reading --------------------------------------------------------------------------


def _answer_events(found: Iterable[Any]) -> list[tuple[int, dict[str, Any], str]]:
    """(seq, data, time) of stored or carried dispute.answer entries."""
    out = []
    for entry in found:
        seq, kind, text = _columns(entry)
        if kind == ANSWER_TYPE:
            event = json.loads(text)
            out.append((seq, event["data"], str(event.get("time", ""))))
    return out


def _columns(entry: Any) -> tuple[int, str, str]:
    if isinstance(entry, dict):
        return int(entry["seq"]), str(entry["type"]), str(entry["event"])
    return int(entry.seq), str(entry.type), str(entry.event)


def _latest(
    answers: list[tuple[int, dict[str, Any], str]], invoice: str
) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
    latest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for seq, data, _ in sorted(answers, key=lambda a: a[0]):
        if data.get("invoice_id") == invoice:
            latest[(data["line_id"], data["category"])] = (seq, data)
    return latest


def derive_answers(
    entries: Iterable[Any], invoice: str, claims: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every answer to a finding of `invoice` among `entries`, in seq order, as the packet's
    `answers` member holds it: the event's data with its `seq`, `time` and `status`
    (`current`, `superseded` or `stale`: rules 3)."""
    answers = [a for a in _answer_events(entries) if a[1].get("invoice_id") == invoice]
    latest = _latest(answers, invoice)
    by_key = {(c["line_id"], c["category"]): c for c in claims}
    out = []
    for seq, data, time in sorted(answers, key=lambda a: a[0]):
        key = (data["line_id"], data["category"])
        if latest[key][0] != seq:
            status = "superseded"
        else:
            status = "current" if _figures_hold(data, by_key.get(key)) else "stale"
        out.append({"seq": seq, "time": time, "status": status, **data})
    return out


def _figures_hold(data: dict[str, Any], claim: dict[str, Any] | None) -> bool:
    return (
        claim is not None
        and Decimal(claim["amount"]) == Decimal(str(data["finding_amount"]))
        and Decimal(str(claim["gpu_seconds"])) == Decimal(str(data["finding_gpu_seconds"]))
        and (claim["currency"] or None) == data.get("currency")
    )


def answer_problems(entries: Iterable[Any], invoice: str, verifier: Verifier) -> list[str]:
    """The signature problems of the answers to `invoice` among `entries`, by seq."""
    return [
        f"seq {seq}: {problem}"
        for seq, data, _ in _answer_events(entries)
        if data.get("invoice_id") == invoice
        and (problem := signature_problem(data, verifier)) is not None
    ]


def states(answers: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each finding's answer that is neither superseded (rule 3), by (line_id, category)."""
    return {(a["line_id"], a["category"]): a for a in answers if a["status"] != "superseded"}


def short_state(answer: dict[str, Any] | None) -> str:
    """A finding's state as the finance pages show it (served and static): the provider's
    current answer, accepted, rejected or partly (with its amount); open when none, or
    when the answer was given to other figures than the finding's now (stale)."""
    if answer is None:
        return "open"
    if answer["status"] == "stale":
        return "open (the answer was to other figures)"
    if answer["state"] == "partly":
        return f"partly: {answer['amount']} accepted"
    return str(answer["state"])


def cell_answers(entries: Iterable[Any], cells: Iterable[Any]) -> Answers:
    """Each finding's answer as the finance page shows it, by (tenant, invoice, line_id,
    category), for the provider-borne and disputed cells of a reconciliation (`Cell`s) and
    the stored `dispute.answer` entries of their tenants (rules 1 to 3, as `derive_answers`
    applies them). A finding's figures are its cell's (claims.finding_figures), so whether
    an answer is stale is told without recomputing the claims' stretches and citations."""
    by_tenant: dict[str, list[Any]] = {}
    for entry in entries:
        by_tenant.setdefault(str(entry.tenant), []).append(entry)
    findings: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        if cell.bearer in ("provider", "disputed"):
            findings.setdefault((cell.tenant, cell.invoice_id), []).append(
                {
                    "line_id": cell.line_id,
                    "category": cell.category,
                    **finding_figures(cell.gpu_us, cell.cents, cell.minor, cell.currency),
                }
            )
    found: Answers = {}
    for (tenant, invoice), claims in findings.items():
        answered = by_tenant.get(tenant)
        if not answered:
            continue
        current = states(derive_answers(answered, invoice, claims))
        for (line_id, category), answer in current.items():
            state = answer["state"] if answer["status"] == "current" else "open"
            found[(tenant, invoice, line_id, category)] = FindingAnswer(
                state, short_state(answer), accepted_amount(answer)
            )
    return found


def stored_cell_answers(store: Store, cells: Iterable[Any]) -> Answers:
    """`cell_answers` of the answers stored in `store`."""
    return cell_answers(read.entries(store, type=ANSWER_TYPE), cells)


def accepted_amount(answer: dict[str, Any]) -> Decimal:
    """The money a current answer accepts: the finding's, or the part."""
    if answer["status"] != "current" or answer["state"] == "rejected":
        return Decimal(0)
    return Decimal(
        str(answer["amount"] if answer["state"] == "partly" else answer["finding_amount"])
    )


__all__ = [
    "ANSWER_TYPE",
    "AnswerFileError",
    "Asked",
    "Recorded",
    "accepted_amount",
    "answer_problems",
    "cell_answers",
    "derive_answers",
    "finding_key",
    "read_answer_file",
    "record_answers",
    "short_state",
    "signature_problem",
    "states",
    "stored_cell_answers",
]
