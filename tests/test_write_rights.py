"""Who may write what (schemas/owners.py, docs/evidence.md): a tenant's source writes only
that tenant's own events, a tenant's dcgmi text is never a fleet fault, and no tenant can
make another tenant's event a duplicate or a conflict, whatever source and id it claims.
Every attack on the store runs on SQLite and PostgreSQL; expected values by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import MetaData, UniqueConstraint, func, select, text

from ingest import IngestError, extract
from ledger import Appender, Store, verify_ledger
from ledger.tables import entries, metadata, quarantine
from schemas import Accepted, Origin, Rejected, validate_event
from schemas.owners import PROVIDER_SCHEMES, TENANT_TYPES, Owner, OwnerError
from tests.conftest import event, progress, run_cli, write_jsonl
from tests.test_ingest_dcgm_stats import header, table

GRANT = event("allocation.granted", "g1", {"tenant": "acme", "allocation_id": "A1", "gpus": 8})
FAULT = event("health.fault", "f1", {"node": "n1", "code": "xid-79", "severity": "critical"})
LINE = event(
    "billing.line",
    "l1",
    {
        "tenant": "acme",
        "invoice_id": "I1",
        "line_id": "L1",
        "allocation_id": "A1",
        "period_start": "2026-01-05T00:00:00Z",
        "period_end": "2026-01-05T01:00:00Z",
        "gpus": 8,
        "amount": "10.00",
        "currency": "USD",
    },
)


def stored(db: str) -> list[tuple[str | None, str, str, str]]:
    """(tenant, source, id, type) of every entry, in seq order."""
    store = Store(db)
    with store.reading() as conn:
        rows = conn.execute(
            select(entries.c.tenant, entries.c.source, entries.c.id, entries.c.type).order_by(
                entries.c.seq
            )
        ).all()
    store.close()
    return [tuple(r) for r in rows]


def quarantine_rows(db: str) -> list[dict[str, Any]]:
    store = Store(db)
    with store.reading() as conn:
        rows = [
            dict(r) for r in conn.execute(select(quarantine).order_by(quarantine.c.qid)).mappings()
        ]
    store.close()
    return rows


# -- the owner's rights ---------------------------------------------------------------


def test_an_owner_is_the_provider_or_one_named_tenant() -> None:
    assert Owner.parse(None) == Owner.parse("provider") == Owner(None)
    assert Owner.parse("tenant:acme") == Owner("acme")
    assert str(Owner("acme")) == "tenant:acme"
    for bad in ("tenant:", "tenant: ", "acme", "Provider", ""):
        with pytest.raises(OwnerError):
            Owner.parse(bad)


def test_the_tenant_types_are_what_a_job_says_of_itself_and_what_it_measured() -> None:
    assert TENANT_TYPES == {
        "job.submitted",
        "job.started",
        "job.progress",
        "job.completed",
        "job.failed",
        "job.cancelled",
        "checkpoint.started",
        "checkpoint.saved",
        "checkpoint.restored",
        "work.accepted",
        "work.rejected",
        "probe.result",
        "inference.window",
        "placement.observed",
    }


@pytest.mark.parametrize(
    ("record", "field", "words"),
    [
        (FAULT, "type", "may not write fleet events"),
        (GRANT, "type", "may not write allocation.granted events"),
        (LINE, "type", "may not write billing.line events"),
        (
            event(
                "policy.decision",
                "d1",
                {"tenant": "acme", "decision": "preempted", "job_id": "j1"},
            ),
            "type",
            "may not write policy.decision events",
        ),
        (
            event("policy.terms", "t1", {"tenant": "acme", "warmup_allowance_s": 86400}),
            "type",
            "may not write policy.terms events",
        ),
        (
            event(
                "fleet.change",
                "c1",
                {"change_id": "c1", "kind": "drain", "started_at": "2026-01-05T09:00:00Z"},
            ),
            "type",
            "may not write fleet events",
        ),
        (
            progress(1, tenant="beta"),
            "data.tenant",
            "writes only its own tenant's events, not 'beta''s",
        ),
    ],
)
def test_a_tenants_source_may_not_write_what_is_the_providers_or_another_tenants(
    tmp_path: Path, record: dict[str, Any], field: str, words: str
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [record])
    [rejected] = list(extract(path, owner="tenant:acme"))
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field) == (1, field)
    assert words in rejected.reason and "tenant:acme" in rejected.reason
    [accepted] = list(extract(path))  # the provider's: the default owner
    assert isinstance(accepted, Accepted)


def test_a_tenants_source_writes_its_own_events_and_names_itself_where_they_name_no_tenant(
    tmp_path: Path,
) -> None:
    anonymous = event("job.progress", "p9", {"job_id": "j1", "step": 9})
    path = write_jsonl(tmp_path / "e.jsonl", [progress(1), anonymous])
    records = list(extract(path, owner="tenant:acme"))
    assert [(r.tenant, r.id) for r in records if isinstance(r, Accepted)] == [
        ("acme", "p1"),
        ("acme", "p9"),
    ]


def test_a_bad_owner_is_a_one_line_error_and_nothing_is_stored(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [progress(1)])
    code, out, err = run_cli("ingest", "--db", sqlite_url, "--owner", "acme", str(path))
    assert (code, out) == (2, "")
    assert err == "Error: --owner: expected 'provider' or 'tenant:NAME', found 'acme'\n"
    assert not (tmp_path / "ledger.db").exists()
    with pytest.raises(IngestError, match="found 'tenant:'") as bad:
        list(extract(path, owner="tenant:"))
    assert bad.value.option == "owner"


def test_a_tenant_owned_ingest_quarantines_what_it_may_not_write_and_appends_the_rest(
    tmp_path: Path, db_url: str
) -> None:
    path = write_jsonl(
        tmp_path / "e.jsonl", [progress(1), GRANT, progress(2, tenant="beta"), progress(3)]
    )
    code, out, err = run_cli("ingest", "--db", db_url, "--owner", "tenant:acme", str(path))
    assert code == 1
    assert out.endswith("read 4 · appended 2 · duplicate 0 · quarantined 2\n")
    assert err.splitlines()[0].startswith(
        f"{path}:2: type: a source of tenant:acme may not write allocation.granted"
    )
    assert err.splitlines()[1].startswith(
        f"{path}:3: data.tenant: a source of tenant:acme writes only"
    )
    assert stored(db_url) == [
        ("acme", "test://fleet", "p1", "job.progress"),
        ("acme", "test://fleet", "p3", "job.progress"),
    ]
    assert [(r["line"], r["field"]) for r in quarantine_rows(db_url)] == [
        (2, "type"),
        (3, "data.tenant"),
    ]


def test_a_manifest_entry_names_its_owner(tmp_path: Path, db_url: str) -> None:
    write_jsonl(tmp_path / "tenant.jsonl", [progress(1), FAULT])
    write_jsonl(tmp_path / "fleet.jsonl", [FAULT])
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "files": [
                    {"path": "tenant.jsonl", "owner": "tenant:acme"},
                    {"path": "fleet.jsonl", "owner": "provider"},
                ]
            }
        )
    )
    code, _, _ = run_cli("ingest", "--db", db_url, "--manifest", str(manifest))
    assert code == 1  # the tenant's fault, quarantined
    assert stored(db_url) == [
        ("acme", "test://fleet", "p1", "job.progress"),
        (None, "test://fleet", "f1", "health.fault"),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"files": [{"path": "fleet.jsonl", "owner": "customer"}]}))
    code, _, err = run_cli("ingest", "--db", db_url, "--manifest", str(bad))
    assert (code, err) == (
        2,
        f"Error: {bad}:1: files[0].owner: expected 'provider' or 'tenant:NAME', found "
        "'customer'\n",
    )


# -- forged faults ----------------------------------------------------------------------


def job_log(tmp_path: Path) -> Path:
    """A tenant's job output that prints dcgmi stats text with a critical XID in it."""
    path = tmp_path / "gpu-node-03.txt"
    lines = [
        "step 4000 loss 2.113",
        *header("train-8812"),
        *table(gpu="3", xids=("0:12:05 (XID 79)",)),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dcgmi_text_in_a_tenants_job_log_is_never_a_fleet_fault(
    tmp_path: Path, db_url: str
) -> None:
    path = job_log(tmp_path)
    code, out, err = run_cli(
        "ingest",
        "--db",
        db_url,
        "--format",
        "dcgm-stats",
        "--timezone",
        "UTC",
        "--owner",
        "tenant:physics",
        str(path),
    )
    assert code == 1
    # the fault and its clearing quarantined; the tenant's own telemetry appended
    assert "read 3 · appended 1 · duplicate 0 · quarantined 2" in out
    assert stored(db_url) == [
        (
            "physics",
            "dcgm://gpu-node-03",
            "train-8812:3:stats@2026-01-07T10:00:00Z",
            "job.submitted",
        )
    ]
    assert [(r["field"], r["reason"].split(" (")[0]) for r in quarantine_rows(db_url)] == [
        ("type", "a source of tenant:physics may not write fleet events"),
    ] * 2
    assert "may not write fleet events" in err
    # the provider's own DCGM output, read as the provider's, still gives the fleet fault
    code, _, _ = run_cli(
        "ingest", "--db", db_url, "--format", "dcgm-stats", "--timezone", "UTC", str(path)
    )
    assert code == 0
    assert [(t, type_) for t, _, _, type_ in stored(db_url)][1:] == [
        (None, "health.fault"),
        (None, "health.cleared"),
    ]


# -- shadowed events --------------------------------------------------------------------


def claimed(tenant: str, step: int) -> dict[str, Any]:
    """acme's event p1 of source test://fleet, or another tenant's claim to that key."""
    return progress(1, tenant=tenant) | {"data": {"tenant": tenant, "job_id": "j1", "step": step}}


def test_no_tenant_can_make_another_tenants_event_a_conflict_or_a_duplicate(
    tmp_path: Path, db_url: str
) -> None:
    forged = write_jsonl(
        tmp_path / "beta.jsonl", [claimed("beta", 666), claimed("beta", 1) | {"id": "p2"}]
    )
    real = write_jsonl(
        tmp_path / "acme.jsonl", [claimed("acme", 1), claimed("acme", 1) | {"id": "p2"}]
    )
    for owner in ("tenant:beta", "provider"):  # beta's own ingest, or one the provider runs for it
        code, out, _ = run_cli("ingest", "--db", db_url, "--owner", owner, str(forged))
    code, out, _ = run_cli("ingest", "--db", db_url, "--owner", "tenant:acme", str(real))
    assert (code, out) == (0, f"{real}: read 2 · appended 2 · duplicate 0 · quarantined 0\n")
    assert stored(db_url) == [
        ("beta", "test://fleet", "p1", "job.progress"),
        ("beta", "test://fleet", "p2", "job.progress"),
        ("acme", "test://fleet", "p1", "job.progress"),
        ("acme", "test://fleet", "p2", "job.progress"),
    ]
    assert quarantine_rows(db_url) == []
    # acme's own duplicates and conflicts work as before
    code, out, _ = run_cli("ingest", "--db", db_url, str(real))
    assert (code, out) == (0, f"{real}: read 2 · appended 0 · duplicate 2 · quarantined 0\n")
    changed = write_jsonl(tmp_path / "acme2.jsonl", [claimed("acme", 7)])
    code, _, err = run_cli("ingest", "--db", db_url, str(changed))
    assert code == 1 and err.startswith(
        f"{changed}:1: id: event 'p1' from 'test://fleet' is already in the ledger"
    )
    assert verify_ledger(Store(db_url)).ok


@pytest.mark.parametrize("scheme", sorted(PROVIDER_SCHEMES))
def test_a_tenant_cannot_take_the_key_of_what_the_provider_will_write_about_it(
    tmp_path: Path, db_url: str, scheme: str
) -> None:
    """An event is keyed by (source, id, tenant): a tenant writing under a provider's source
    could take the key of its own device counters, grant or line before the provider's
    collector writes it, and have the provider's event quarantined as a conflict (a busy
    GPU's counters blocked, say). The provider's source schemes are refused to tenants."""
    squat = claimed("acme", 1) | {"source": f"{scheme}://n1", "id": "n1:0:GPU-a:-:counters:1"}
    path = write_jsonl(tmp_path / "squat.jsonl", [squat])
    code, out, err = run_cli("ingest", "--db", db_url, "--owner", "tenant:acme", str(path))
    assert (code, out) == (1, f"{path}: read 1 · appended 0 · duplicate 0 · quarantined 1\n")
    assert err.startswith(
        f"{path}:1: source: a source of tenant:acme may not write under the provider's "
        f"{scheme}:// sources"
    )
    assert stored(db_url) == []


def test_a_fleet_event_meets_only_fleet_events(tmp_path: Path, store: Store) -> None:
    """In one batch and across batches: a tenant's claim to a fleet key is its own event,
    and a fleet event is a duplicate or a conflict of a fleet event only."""
    appender = Appender(store)
    fleet, shadow = (
        write_jsonl(tmp_path / "f.jsonl", [FAULT]),
        write_jsonl(tmp_path / "s.jsonl", [progress(1) | {"id": "f1"}]),
    )
    records = list(extract(shadow)) + list(extract(fleet))
    result = appender.append(records)
    assert (result.appended, result.duplicates, result.quarantined) == (2, 0, 0)
    again = appender.append(list(extract(fleet)) + list(extract(shadow)))
    assert (again.appended, again.duplicates, again.quarantined) == (0, 2, 0)
    other = FAULT | {"data": {"node": "n2", "code": "xid-79", "severity": "critical"}}
    conflict = appender.append(list(extract(write_jsonl(tmp_path / "o.jsonl", [other]))))
    assert (conflict.appended, conflict.quarantined) == (0, 1)


def test_the_recorded_lookup_never_answers_with_another_tenants_event(
    tmp_path: Path, store: Store, db_url: str
) -> None:
    from cli import _recorded_event

    Appender(store).append(
        list(extract(write_jsonl(tmp_path / "b.jsonl", [progress(1, tenant="beta")])))
    )
    recorded = _recorded_event(store)
    assert recorded("test://fleet", "p1") is None  # a fleet look-up
    assert recorded("test://fleet", "p1", "acme") is None
    assert recorded("test://fleet", "p1", "beta") is not None


# -- an older store ---------------------------------------------------------------------


def old_store(db_url: str) -> Store:
    """A store as `init` made it before the key named the tenant: a unique constraint on
    (source, id), made from today's tables with the new key's indexes taken out."""
    old = MetaData()
    for table_ in metadata.sorted_tables:
        table_.to_metadata(old)
    old_entries = old.tables["entries"]
    for index in [
        i
        for i in old_entries.indexes
        if i.name in ("entries_event_key", "entries_fleet_event_key")
    ]:
        old_entries.indexes.discard(index)
    old_entries.append_constraint(UniqueConstraint("source", "id", name="entries_event_key"))
    store = Store(db_url)
    with store.writing() as conn:
        old.create_all(conn)
    return store


def test_init_upgrades_an_older_stores_key_and_keeps_every_entry(
    tmp_path: Path, db_url: str
) -> None:
    store = old_store(db_url)
    appender = Appender(store)
    appender.append(
        list(extract(write_jsonl(tmp_path / "a.jsonl", [FAULT, progress(1, tenant="beta")])))
    )

    before = stored(db_url)
    with store.reading() as conn:
        leaves = conn.execute(select(entries.c.leaf_hash).order_by(entries.c.seq)).scalars().all()
    for _ in range(2):  # safe to repeat
        store.init()
    with store.reading() as conn:
        assert (
            conn.execute(select(entries.c.leaf_hash).order_by(entries.c.seq)).scalars().all()
            == leaves
        )
    assert stored(db_url) == before
    assert before == [
        (None, "test://fleet", "f1", "health.fault"),
        ("beta", "test://fleet", "p1", "job.progress"),
    ]
    result = Appender(store).append(
        list(extract(write_jsonl(tmp_path / "c.jsonl", [progress(1), FAULT])))
    )
    assert (result.appended, result.duplicates, result.quarantined) == (1, 1, 0)
    assert verify_ledger(store).ok
    with pytest.raises(Exception, match="append-only"), store.writing() as conn:
        conn.execute(text("UPDATE entries SET type = 'x' WHERE seq = 1"))
    with store.reading() as conn:
        assert conn.execute(select(func.count()).select_from(entries)).scalar_one() == 3


def test_a_body_stays_what_was_hashed(tmp_path: Path, store: Store) -> None:
    """The same key's lookup reads the stored body of its own tenant, byte for byte."""
    appender = Appender(store)
    path = write_jsonl(tmp_path / "a.jsonl", [progress(1), progress(1, tenant="beta")])
    appender.append(list(extract(path)))
    with store.reading() as conn:
        bodies = conn.execute(
            select(entries.c.tenant, entries.c.event).order_by(entries.c.seq)
        ).all()
    assert [(t, orjson.loads(b)["data"]["tenant"]) for t, b in bodies] == [
        ("acme", "acme"),
        ("beta", "beta"),
    ]


# -- the key, as a property -----------------------------------------------------------

_EXAMPLES = iter(range(1_000_000))
_CLAIMS = st.lists(
    st.tuples(
        st.sampled_from([None, "a", "b", "c"]),
        st.sampled_from(["k1", "k2", "k3"]),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(claims=_CLAIMS, size=st.integers(1, 6))
# found by this test: a conflict repeated in a batch was once a "duplicate" of itself
@example(claims=[(None, "k1", 1), (None, "k1", 0), (None, "k1", 0), (None, "k1", 0)], size=2)
def test_each_key_meets_only_its_own_tenants_events(
    store: Store, claims: list[tuple[str | None, str, int]], size: int
) -> None:
    """Any tenants (or the fleet) claiming the same source and ids in any order and in any
    batches: each (tenant, id) keeps its first event, a later equal one is a duplicate and
    a later different one a conflict, exactly as if that tenant were alone."""
    example = next(_EXAMPLES)
    tenants = {t: f"x{example}-{t}" for t in ("a", "b", "c")}

    def raw(tenant: str | None, key: str, step: int) -> dict[str, Any]:
        id_ = f"{example}-{key}"  # the store outlives the example: its ids are its own
        if tenant is None:  # a fleet fault under the same source and id
            return event("health.fault", id_, {"node": f"n{step}", "code": "xid-79"})
        return event("job.progress", id_, {"tenant": tenants[tenant], "job_id": "j", "step": step})

    records = [
        Accepted.of(validate_event(raw(t, i, s)), Origin(f"ex{example}.jsonl", n))
        for n, (t, i, s) in enumerate(claims, start=1)
    ]
    first: dict[tuple[str | None, str], int] = {}
    duplicates = conflicts = 0
    for t, i, s in claims:  # the rules, by hand: per (tenant, id), the first step wins
        if (t, i) not in first:
            first[(t, i)] = s
        elif first[(t, i)] == s:
            duplicates += 1
        else:
            conflicts += 1
    appender = Appender(store)
    totals = [0, 0, 0]
    for start in range(0, len(records), size):
        result = appender.append(records[start : start + size])
        totals = [
            totals[0] + result.appended,
            totals[1] + result.duplicates,
            totals[2] + result.quarantined,
        ]
    assert totals == [len(first), duplicates, conflicts]
    with store.reading() as conn:
        mine = [tenants[t] for t in ("a", "b", "c")]
        rows = conn.execute(
            select(entries.c.tenant, entries.c.id, entries.c.event).where(
                entries.c.tenant.in_(mine) | entries.c.tenant.is_(None)
            )
        ).all()
    kept = {(t, i): orjson.loads(e)["data"] for t, i, e in rows}
    for (t, i), s in first.items():
        data = kept[(None if t is None else tenants[t], f"{example}-{i}")]
        assert data.get("step", data.get("node")) in (s, f"n{s}")
