"""Stale and forked packets: `verify-packet --previous` (an older packet or a checkpoint
note) and `dispute --since-size N`, on real stores (SQLite and PostgreSQL).

The ledger: 6 entries (acme's job and the billing line of INV-1), a checkpoint, then 3
more (zeta's grant and start, acme's accepted result): packets of INV-1 at tree sizes 6
and 9. A second store ingests the same events with the same key: its leaves have other
salts, so its trees of sizes 6 and 9 are a fork of the first ledger's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ledger import Store
from ledger.note import Signer
from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run


def _at(clock: str) -> str:
    return f"2026-01-05T{clock}Z"


def _of(tenant: str, type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    return event(
        type_, id_, {"tenant": tenant, **data}, source=f"slurm://{tenant}", time=_at(clock)
    )


FIRST = [
    _of("acme", "allocation.granted", "g", "10:00:00", allocation_id="A-1", gpus=2, node="n1"),
    _of("acme", "job.started", "s", "10:00:30", job_id="acme-train", allocation_id="A-1"),
    _of("acme", "job.progress", "p1", "10:02:00", job_id="acme-train", step=1),
    _of("acme", "job.completed", "c", "10:05:00", job_id="acme-train"),
    _of("acme", "allocation.released", "r", "10:10:00", allocation_id="A-1"),
    _of(
        "acme",
        "billing.line",
        "l",
        "10:10:00",
        invoice_id="INV-1",
        line_id="L-1",
        allocation_id="A-1",
        period_start=_at("10:00:00"),
        period_end=_at("10:10:00"),
        gpus=2,
        amount="1.00",
        currency="USD",
    ),
]
LATER = [
    _of("zeta", "allocation.granted", "zg", "10:20:00", allocation_id="Z-1", gpus=1, node="n2"),
    _of("zeta", "job.started", "zs", "10:20:30", job_id="zeta-job", allocation_id="Z-1"),
    _of("acme", "work.accepted", "ok", "10:30:00", job_id="acme-train", result_id="R-1"),
]


@dataclass(frozen=True)
class Ledger:
    url: str
    folder: Path
    key: Path

    def ingest(self, events: list[dict[str, Any]], name: str) -> None:
        assert (
            run(
                "ingest", "--db", self.url, str(write_jsonl(self.folder / f"{name}.jsonl", events))
            )[0]
            == 0
        )

    def dispute(self, name: str, *options: str) -> Path:
        out = self.folder / f"{name}.json"
        code, _, err = run(
            "dispute",
            "--db",
            self.url,
            "--tenant",
            "acme",
            "--invoice",
            "INV-1",
            "--key",
            str(self.key),
            "--out",
            str(out),
            *options,
        )
        assert code == 0, err
        return out

    def checkpoints(self) -> int:
        store = Store(self.url)
        with store.reading() as conn:
            count = int(conn.execute(text("SELECT count(*) FROM checkpoints")).scalar_one())
        store.close()
        return count


def verify(packet: Path, previous: Path, key: Path) -> tuple[int, str, str]:
    return run("verify-packet", str(packet), "--pubkey", f"{key}.pub", "--previous", str(previous))


@dataclass(frozen=True)
class Packets:
    ledger: Ledger
    note6: Path  # `gpuledger checkpoint` at tree size 6, as the customer saved it
    p6: Path
    p9: Path  # --since-size 6
    p9_bare: Path  # no consistency proof
    p9_from5: Path  # --since-size 5


@pytest.fixture
def packets(db_url: str, tmp_path: Path) -> Packets:
    key = tmp_path / "key"
    assert run("keygen", "--out", str(key))[0] == 0
    ledger = Ledger(db_url, tmp_path, key)
    ledger.ingest(FIRST, "first")
    code, note, _ = run("checkpoint", "--db", db_url, "--key", str(key))
    assert code == 0
    (tmp_path / "note6.txt").write_text(note)
    p6 = ledger.dispute("p6")
    ledger.ingest(LATER, "later")
    return Packets(
        ledger,
        tmp_path / "note6.txt",
        p6,
        ledger.dispute("p9", "--since-size", "6"),
        ledger.dispute("p9-bare"),
        ledger.dispute("p9-from5", "--since-size", "5"),
    )


def test_a_newer_packet_extends_the_older_packet_and_the_saved_checkpoint(
    packets: Packets,
) -> None:
    key = packets.ledger.key
    for previous in (packets.p6, packets.note6):
        code, out, err = verify(packets.p9, previous, key)
        assert (code, err) == (0, "")
        assert out.startswith(
            "ok: invoice INV-1 of acme, 1 lines; 7 entries of acme complete up to tree size 9"
        )
        assert out.splitlines()[0].endswith(
            "; extends the previous checkpoint of tree size 6"
        )  # then the letter
    assert json.loads(packets.p9.read_text())["bundle"]["consistency"]["from_size"] == 6
    assert verify(packets.p6, packets.p6, key)[0] == 0  # the same tree


def test_a_stale_packet_fails_naming_both_sizes(packets: Packets) -> None:
    assert (
        run("verify-packet", str(packets.p6), "--pubkey", f"{packets.ledger.key}.pub")[0] == 0
    )  # alone it verifies
    assert verify(packets.p6, packets.p9, packets.ledger.key) == (
        1,
        "",
        "FAILED: bundle: stale: the packet's checkpoint is of tree size 6, older than the "
        "previous checkpoint of tree size 9\n",
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (
            "p9_bare",
            "the packet carries no consistency proof from the previous tree size 6 to its tree "
            "size 9 (a dispute built since tree size 6 carries one)",
        ),
        (
            "p9_from5",
            "the packet's consistency proof starts at tree size 5, the previous checkpoint is of "
            "tree size 6",
        ),
    ],
)
def test_a_newer_packet_without_the_right_proof_fails(
    packets: Packets, name: str, reason: str
) -> None:
    assert verify(getattr(packets, name), packets.p6, packets.ledger.key) == (
        1,
        "",
        f"FAILED: bundle: {reason}\n",
    )


def test_an_altered_consistency_proof_is_a_fork(packets: Packets) -> None:
    packet = json.loads(packets.p9.read_text())
    proof = packet["bundle"]["consistency"]["proof"]
    proof[0] = ("0" if proof[0][0] != "0" else "1") + proof[0][1:]
    altered = packets.ledger.folder / "altered.json"
    altered.write_text(json.dumps(packet))
    code, out, err = verify(altered, packets.p6, packets.ledger.key)
    assert (code, out) == (1, "")
    assert err.startswith(
        "FAILED: bundle: fork: the packet's tree of size 9 does not extend the previous tree of "
        "size 6: consistency proof from 6 to 9: computed first root"
    )


def test_a_forked_ledger_fails_naming_the_mismatch(packets: Packets, tmp_path: Path) -> None:
    fork = Ledger(
        f"sqlite:///{tmp_path / 'fork.db'}", tmp_path, packets.ledger.key
    )  # the same key, other salts
    fork.ingest(FIRST, "fork-first")
    f6 = fork.dispute("f6")
    fork.ingest(LATER, "fork-later")
    f9 = fork.dispute("f9", "--since-size", "6")
    code, out, err = verify(f6, packets.p6, fork.key)
    assert (code, out) == (1, "")
    assert err.startswith(
        "FAILED: bundle: fork: the packet's checkpoint and the previous one are both of tree "
        "size 6 with different roots ("
    )
    code, out, err = verify(f9, packets.p6, fork.key)
    assert (code, out) == (1, "")
    assert err.startswith(
        "FAILED: bundle: fork: the packet's tree of size 9 does not extend the previous tree of "
        "size 6: consistency proof from 6 to 9: computed first root"
    )


def test_since_size_past_the_head_is_an_input_error_before_signing(packets: Packets) -> None:
    ledger, before = packets.ledger, packets.ledger.checkpoints()
    out = ledger.folder / "never.json"
    code, said, err = run(
        "dispute",
        "--db",
        ledger.url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(ledger.key),
        "--out",
        str(out),
        "--since-size",
        "10",
    )
    assert (code, said, err) == (
        2,
        "",
        "Error: --since-size: 10 is not a tree size of this ledger, [1, 9]\n",
    )
    assert not out.exists() and ledger.checkpoints() == before


def test_a_previous_file_that_is_no_checkpoint(packets: Packets) -> None:
    key, folder = packets.ledger.key, packets.ledger.folder
    (folder / "nothing.json").write_text('{"kind": "gpuledger-dispute"}')
    assert verify(packets.p9, folder / "nothing.json", key) == (
        2,
        "",
        f"Error: --previous: {folder / 'nothing.json'}: neither a checkpoint note nor a packet "
        "with bundle.checkpoint\n",
    )
    other = Signer.generate("gpuledger")
    body = packets.note6.read_text().rpartition("\n\n")[0] + "\n"
    (folder / "other.txt").write_text(other.sign(body))
    code, out, err = verify(packets.p9, folder / "other.txt", key)
    assert (code, out) == (1, "")
    assert err.startswith(
        "FAILED: bundle: previous checkpoint: the note carries no signature by gpuledger (key id"
    )
