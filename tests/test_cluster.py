"""The reconciliation's partitions on a real local Ray cluster (`reconcile --cluster`):
the merged answer is the single process's, byte for byte, on every sample fixture, on the
demo's fleet and on random fleets (whose lines the pandas oracle also checks), on SQLite
and PostgreSQL. The cluster is started once per test session (conftest `ray_cluster`)."""

from __future__ import annotations

import io
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ingest
import ledger
from fixtures.sim import SimConfig, simulate
from ledger import Store
from ledger.sealed import seal_store
from reconcile import Reconciliation, reconcile_store
from reconcile.engine.cluster import Cluster, ClusterError, parse_cluster, reconcile_on_cluster
from reconcile.engine.partitions import balanced, reconcile_partitioned
from reconcile.reports import output
from schemas import Accepted, Origin, validate_event
from tests.conftest import PG_SKIP_REASON, run_cli
from tests.test_reconcile_oracle import Fleet, by_line, differences, ledger_of, random_fleet
from tests.test_reconcile_oracle import oracle_lines as pandas_lines
from tests.test_samples import ROWS, SAMPLES

LOCAL = Cluster(None, 2)


def written(result: Reconciliation, fmt: str, tmp: Path) -> bytes:
    """What `reconcile --format FMT` writes of `result`."""
    if fmt == "parquet":
        path = tmp / "r.parquet"
        output.write(result, fmt, path)
        return path.read_bytes()
    stream = io.StringIO()
    output.write(result, fmt, stream)
    return stream.getvalue().encode()


def assert_same(single: Reconciliation, cluster: Reconciliation, tmp: Path) -> None:
    assert cluster.table.equals(single.table)
    assert cluster.unbilled_us == single.unbilled_us
    for fmt in ("json", "csv", "parquet"):
        assert written(cluster, fmt, tmp) == written(single, fmt, tmp), fmt


# ------------------------------------------------------------ naming a cluster


def test_a_cluster_is_named_local_n_or_a_ray_address() -> None:
    assert parse_cluster("local[3]") == Cluster(None, 3)
    assert parse_cluster("ray://head.ray.svc:10001") == Cluster("ray://head.ray.svc:10001", 0)
    for bad in ("local[0]", "local", "ray://", "http://head:10001", "local[2"):
        with pytest.raises(ClusterError, match="expected local\\[N\\]"):
            parse_cluster(bad)


def test_the_command_names_its_flag_for_a_bad_cluster(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, _, err = run_cli("reconcile", "--db", url, "--cluster", "nowhere")
    assert code == 2
    assert err == (
        "Error: --cluster: cluster 'nowhere': expected local[N] (N workers here) or "
        "ray://HOST:PORT\n"
    )


def test_tenants_are_balanced_by_entries_the_largest_first() -> None:
    # a 10, b 6, c 5, d 1 on 2 partitions: a → 1; b → 2; c → 2 (6 < 10); d → 1 (10 < 11)
    parts = balanced({"a": 10, "b": 6, "c": 5, "d": 1}, 2)
    assert [(p.tenants, p.entries) for p in parts] == [(("a", "d"), 11), (("b", "c"), 11)]
    assert [p.tenants for p in balanced({}, 4)] == [()]  # the fleet's events alone
    assert len(balanced({"a": 1}, 4)) == 1


# ------------------------------------------------------------ stores


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        yield str(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="module")
def demo_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo-fleet")
    simulate(SimConfig(), out)  # the demo's fleet: `gpuledger demo` simulates this config
    return out


def _ingest_manifest(out: Path, store: Store) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    appender = ledger.Appender(store)
    for item in manifest["files"]:
        records = ingest.extract(out / item["path"], item["format"], **item.get("options", {}))
        assert ledger.append_stream(appender, records, 5000).quarantined == 0


def test_the_plan_counts_each_tenant_s_entries_from_the_index_as_rows_count_them(
    backend_url: str,
) -> None:
    """The plan reads each tenant's count at the head from the (tenant, tenant_seq) index;
    the oracle counts the rows. An earlier snapshot (`upto_seq`) is counted row by row."""
    from sqlalchemy import select

    from ledger.tables import entries
    from reconcile.engine.partitions import plan
    from tests.reconcile_helpers import Scenario
    from tests.reconcile_helpers import ingest as ingest_events

    s = Scenario()
    s.grant("a1", gpus=8, at="10:00")
    s.grant("z1", gpus=4, at="10:00", tenant="zeta", node="n2")
    for minute in range(1, 12):
        s.progress("j1", step=minute, at=f"10:{minute:02d}")
    s.fault(at="10:20", node="n2", device="GPU-1")
    s.line("L1", "a1", "10:00", "11:00", gpus=8, amount="16.00")
    store = Store(backend_url)
    store.init()
    ingest_events(store, s.events)
    with store.reading() as conn:
        rows = conn.execute(select(entries.c.seq, entries.c.tenant)).all()
    counted: dict[str | None, int] = {}
    for _seq, tenant in rows:
        counted[tenant] = counted.get(tenant, 0) + 1
    layout = plan(store, 2)
    assert {t: n for p in layout.partitions for t, n in [(p.tenants[0], p.entries)]} == {
        t: n for t, n in counted.items() if t is not None
    }
    assert layout.fleet_entries == counted[None] and layout.upto_seq == len(rows)
    early = plan(store, 2, upto_seq=3)
    first = [tenant for seq, tenant in rows if seq <= 3]
    assert sum(p.entries for p in early.partitions) == sum(t is not None for t in first)
    store.close()


# ------------------------------------------------------------ byte for byte


def test_every_sample_fixture_reconciles_the_same_on_the_cluster(
    ray_cluster: int, backend_url: str, tmp_path: Path
) -> None:
    assert run_cli("init", "--db", backend_url)[0] == 0
    for name, fmt, options, _counts in ROWS:
        code, _, err = run_cli(
            "ingest", "--db", backend_url, "--format", fmt, *options, str(SAMPLES / name)
        )
        assert code == 0, (name, err)
    store = Store(backend_url)
    single = reconcile_store(store)
    assert single.cell_count > 0  # the samples bill lines: the comparison means something
    assert_same(single, reconcile_on_cluster(store, LOCAL), tmp_path)
    for tenant in sorted(single.unbilled_us)[:1]:
        assert_same(
            reconcile_store(store, tenant), reconcile_on_cluster(store, LOCAL, tenant), tmp_path
        )
    store.close()


def test_the_demo_fleet_reconciles_the_same_on_the_cluster(
    ray_cluster: int, backend_url: str, demo_fleet: Path, tmp_path: Path
) -> None:
    store = Store(backend_url)
    store.init()
    _ingest_manifest(demo_fleet, store)
    single = reconcile_store(store)
    assert len(single.unbilled_us) == 4  # four tenants: four partitions' worth on 2 workers
    assert_same(single, reconcile_on_cluster(store, LOCAL), tmp_path)
    invoice = single.cells[0].invoice_id
    assert_same(
        reconcile_store(store, invoice=invoice),
        reconcile_on_cluster(store, LOCAL, invoice=invoice),
        tmp_path,
    )
    # more partitions than workers, and one, run here: the same again
    for parts in (1, 3):
        assert reconcile_partitioned(store, parts).table.equals(single.table)
    # the command itself, with sealed pages read by the workers for part of the ledger
    store.sealed_entries = 4096
    assert seal_store(store) > 0
    code, cluster_json, err = run_cli(
        "reconcile", "--db", backend_url, "--cluster", "local[2]", "--format", "json"
    )
    assert code == 0, err
    assert cluster_json.encode() == written(single, "json", tmp_path)
    store.close()


def test_the_demo_runs_on_the_cluster_as_a_user_types_it(ray_cluster: int, tmp_path: Path) -> None:
    """`gpuledger demo`'s own store, reconciled with and without the cluster."""
    out = tmp_path / "demo"
    code, _, err = run_cli("demo", "--out", str(out))
    assert code == 0, err
    url = f"sqlite:///{out / 'gpuledger.db'}"
    for fmt in ("json", "csv", "table"):
        single = run_cli("reconcile", "--db", url, "--format", fmt)
        cluster = run_cli("reconcile", "--db", url, "--format", fmt, "--cluster", "local[2]")
        assert single[0] == cluster[0] == 0
        assert cluster[1] == single[1], fmt
    shutil.rmtree(out)


def test_the_reports_that_read_the_reconciliation_take_the_cluster(
    ray_cluster: int, demo_fleet: Path, tmp_path: Path
) -> None:
    """`report envelope|outcomes|placement|promises --cluster`: the reconciliation they read
    made by the cluster's partitions, the same report byte for byte (and for one tenant)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = Store(url)
    store.init()
    _ingest_manifest(demo_fleet, store)
    tenant = sorted(reconcile_store(store).unbilled_us)[0]
    store.close()
    for name in ("envelope", "outcomes", "placement", "promises"):
        for scope in ((), ("--tenant", tenant)):
            args = ("report", name, "--db", url, *scope, "--format", "json")
            single = run_cli(*args)
            cluster = run_cli(*args, "--cluster", "local[2]")
            assert single[0] == cluster[0] == 0, (name, cluster[2])
            assert cluster[1] == single[1], (name, scope)
    code, _, err = run_cli("report", "envelope", "--db", url, "--cluster", "nowhere")
    assert code == 2
    assert err.startswith("Error: --cluster: cluster 'nowhere': expected local[N]")


RANDOM = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@RANDOM
@given(seed=st.integers(0, 2**32 - 1))
def test_random_fleets_through_the_cluster_match_the_oracle_and_the_single_run(
    ray_cluster: int, tmp_path: Path, seed: int
) -> None:
    events = random_fleet(random.Random(seed))
    expected = pandas_lines(events)
    with ledger_of(events) as store:
        single = reconcile_store(store)
        cluster = reconcile_on_cluster(store, LOCAL)
        assert_same(single, cluster, tmp_path)
    got = by_line(cluster.cells)
    assert not differences(expected, got), f"seed {seed}: {differences(expected, got)}"


def test_one_placement_row_a_line_key_the_latest_line_s(ray_cluster: int, tmp_path: Path) -> None:
    """Two lines sent under one (tenant, invoice, line) key, neither correcting the other:
    one placement row for the key, the later line's (RULES.md 13), whatever order DuckDB's
    threads or the partitions give, so the JSON is the same bytes either way."""
    line = {"invoice_id": "I1", "line_id": "L1", "gpus": 2, "amount": "10.00", "currency": "USD"}
    window = {"period_start": "2026-01-01T00:00:00Z", "period_end": "2026-01-01T01:00:00Z"}
    fleet = Fleet()
    for aid in ("A", "B"):  # 2 whole GPUs each, from the start
        fleet.add("allocation.granted", 0, tenant="t", allocation_id=aid, gpus=2, node="n1")
    # A's capture: its 2 GPUs over NVLink, so A is as_sold; B has none: unobserved
    topology = {
        "gpus": [{"name": "GPU0"}, {"name": "GPU1"}],
        "nics": [],
        "links": [{"a": "GPU0", "b": "GPU1", "link": "NV18"}],
    }
    fleet.add(
        "placement.observed", 60, tenant="t", allocation_id="A", node="n1", topology=topology
    )
    fleet.add("billing.line", 7200, tenant="t", allocation_id="B", **line, **window)
    fleet.add("billing.line", 7200, tenant="t", allocation_id="A", **line, **window)
    fleet.add("billing.line", 7200, tenant="u", allocation_id="C", **line, **window)
    with ledger_of(fleet.events) as store:
        single = reconcile_store(store)
        assert single.placement is not None
        assert single.placement.to_pylist() == [
            {
                "tenant": "t",
                "invoice_id": "I1",
                "line_id": "L1",
                "state": "as_sold",
                "share": None,
            },
            {
                "tenant": "u",
                "invoice_id": "I1",
                "line_id": "L1",
                "state": "unobserved",
                "share": None,
            },
        ]
        cluster = reconcile_on_cluster(store, LOCAL)
        assert cluster.placement is not None and cluster.placement.equals(single.placement)
        assert_same(single, cluster, tmp_path)


@pytest.mark.skipif(PG_SKIP_REASON is not None, reason=str(PG_SKIP_REASON))
def test_random_fleets_on_postgresql_through_the_cluster(
    ray_cluster: int, pg_url: str, tmp_path: Path
) -> None:
    store = Store(pg_url)
    store.init()
    rng = random.Random(20261206)
    events = [e for _ in range(3) for e in random_fleet(rng)]
    for i, e in enumerate(events):
        e["id"] = f"e{i}"
    accepted = [Accepted.of(validate_event(e), Origin("gen", i)) for i, e in enumerate(events, 1)]
    ledger.Appender(store).append(accepted)
    assert_same(reconcile_store(store), reconcile_on_cluster(store, LOCAL), tmp_path)
    store.close()


def test_a_store_in_memory_cannot_go_to_a_cluster() -> None:
    with pytest.raises(ClusterError, match="in memory"):
        reconcile_on_cluster(Store("sqlite://"), LOCAL)
