"""Witnesses, end to end through the command line: a log grows, a witness cosigns each
checkpoint only with a consistency proof from the last one it cosigned, the cosignatures
go into the store and into a dispute packet, and verify-packet --witness requires them.
A second history signed with the log's key is refused as a fork."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from ledger import Store
from ledger.note import COSIGNATURE_V1, Signer
from ledger.witness import (
    CosignatureError,
    WitnessError,
    WitnessRequest,
    cosign,
    verify_cosignature,
)
from tests.conftest import run_cli as run
from tests.conftest import write_jsonl
from tests.test_dispute import ACME_AFTER, ACME_BEFORE, FLEET, ZETA
from tests.test_verify_tamper import drop_guards

ORIGIN = "gpuledger.local/ledger"
FIRST = ACME_BEFORE + ZETA[:3] + FLEET[:1]  # 10 entries
REST = ZETA[3:] + FLEET[1:] + ACME_AFTER  # 3 + 5 + 6 = 14 more: 24 in all


@dataclass(frozen=True)
class Setup:
    folder: Path
    url: str

    @property
    def key(self) -> Path:
        return self.folder / "log.key"

    @property
    def state(self) -> Path:
        return self.folder / "witness"

    @property
    def witness_pub(self) -> Path:
        return self.state / "witness.key.pub"

    def ok(self, *args: str) -> str:
        code, out, err = run(*args)
        assert code == 0, err
        return out

    def ingest(self, name: str, events: list[dict[str, object]]) -> None:
        self.ok("ingest", "--db", self.url, str(write_jsonl(self.folder / name, events)))

    def request(self, old_size: int, name: str) -> Path:
        path = self.folder / name
        self.ok(
            "checkpoint",
            "--db",
            self.url,
            "--key",
            str(self.key),
            "--witness-request-from",
            str(old_size),
            "--out",
            str(path),
        )
        return path

    def cosign_and_keep(self, request: Path) -> str:
        answer = self.folder / f"{request.stem}.cosig"
        self.ok(
            "witness", "cosign", "--state", str(self.state), str(request), "--out", str(answer)
        )
        return self.ok(
            "checkpoint",
            "--db",
            self.url,
            "--cosignatures",
            str(answer),
            "--witness",
            str(self.witness_pub),
        )


@pytest.fixture
def setup(tmp_path: Path, db_url: str) -> Setup:
    s = Setup(tmp_path, db_url)
    s.ok("keygen", "--out", str(s.key), "--name", ORIGIN)
    s.ok(
        "witness",
        "init",
        "--state",
        str(s.state),
        "--name",
        "witness.example/w1",
        "--origin",
        ORIGIN,
        "--log-key",
        f"{s.key}.pub",
    )
    return s


def test_a_growing_log_is_cosigned_and_its_packet_carries_the_cosignature(setup: Setup) -> None:
    setup.ingest("first.jsonl", FIRST)
    assert (
        setup.cosign_and_keep(setup.request(0, "r1.txt"))
        == "checkpoint #1: cosigned by witness.example/w1\n"
    )
    setup.ingest("rest.jsonl", REST)
    request = setup.request(10, "r2.txt")
    assert request.read_text().startswith("old 10\n")
    assert setup.cosign_and_keep(request) == "checkpoint #2: cosigned by witness.example/w1\n"
    shown = setup.ok("witness", "show", "--state", str(setup.state)).splitlines()
    assert shown[0] == setup.witness_pub.read_text().strip()
    assert shown[1].startswith(
        f"{ORIGIN}  {Path(f'{setup.key}.pub').read_text().strip()}  cosigned size 24, root "
    )

    packet = setup.folder / "packet.json"
    setup.ok(
        "dispute",
        "--db",
        setup.url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-acme-01",
        "--key",
        str(setup.key),
        "--out",
        str(packet),
        "--stored-checkpoint",
    )
    said = setup.ok(
        "verify-packet",
        str(packet),
        "--pubkey",
        f"{setup.key}.pub",
        "--witness",
        str(setup.witness_pub),
    )
    first, second = said.splitlines()[:2]  # then the dispute letter's summary
    assert (
        first.startswith("ok: invoice INV-acme-01 of acme")
        and second == "cosigned by witness.example/w1"
    )

    other = setup.folder / "other"
    setup.ok("witness", "init", "--state", str(other), "--name", "witness.example/w2")
    code, _, err = run(
        "verify-packet",
        str(packet),
        "--pubkey",
        f"{setup.key}.pub",
        "--witness",
        str(other / "witness.key.pub"),
    )
    assert code == 1 and err.startswith(
        "FAILED: the checkpoint carries no cosignature by witness witness.example/w2 (key id "
    )


def test_a_second_history_signed_with_the_log_key_is_refused_as_a_fork(
    setup: Setup, tmp_path: Path
) -> None:
    setup.ingest("first.jsonl", FIRST)
    setup.cosign_and_keep(setup.request(0, "r1.txt"))
    cosigned = (setup.state / "logs").glob("*.json").__next__().read_text()
    # The log keeps its key and shows the witness a history where one event differs.
    forked = Setup(tmp_path / "fork", f"sqlite:///{tmp_path / 'fork.db'}")
    forked.folder.mkdir()
    for name in ("log.key", "log.key.pub"):
        (forked.folder / name).write_bytes((setup.folder / name).read_bytes())
    edited = [dict(e) for e in FIRST]
    edited[3] = {**edited[3], "data": {**edited[3]["data"], "step": 99}}
    forked.ingest("first.jsonl", edited + REST)
    request = forked.request(10, "fork.txt")
    code, out, err = run("witness", "cosign", "--state", str(setup.state), str(request))
    assert (code, out) == (1, "")
    first_line = err.splitlines()[0]
    assert first_line.startswith(f"FAILED: fork: '{ORIGIN}' showed a checkpoint of size 24 (root ")
    assert "that does not extend the one this witness cosigned, size 10 (root " in first_line
    offered = request.read_text().partition("\n\n")[2]
    assert "cosigned earlier:\n" in err and f"offered now:\n{offered}" in err
    assert (setup.state / "logs").glob(
        "*.json"
    ).__next__().read_text() == cosigned  # state unchanged


def test_requests_the_witness_cannot_act_on_exit_2(setup: Setup, tmp_path: Path) -> None:
    setup.ingest("first.jsonl", FIRST)
    stale = setup.request(3, "stale.txt")
    code, _, err = run("witness", "cosign", "--state", str(setup.state), str(stale))
    assert code == 2 and err == (
        f"Error: the witness last cosigned '{ORIGIN}' at size 0, the request starts at 3: "
        "make the request from size 0\n"
    )
    stranger = Signer.generate(ORIGIN)  # the log's name, another key
    note = stranger.sign(stale.read_text().partition("\n\n")[2].partition("\n\n")[0] + "\n")
    forged = tmp_path / "forged.txt"
    forged.write_text(WitnessRequest(0, [], note).text())
    code, _, err = run("witness", "cosign", "--state", str(setup.state), str(forged))
    assert code == 2 and err.startswith(
        f"Error: the checkpoint of '{ORIGIN}' is not signed by the log's key: "
    )


BAD_REQUESTS: dict[str, str] = {
    "no old line": "10\n\nx\n",
    "a signed old size": "old +10\n\nx\n",
    "a proof line of 31 bytes": f"old 10\n{base64.b64encode(bytes(31)).decode()}\n\nx\n",
    "64 proof lines": "old 10\n" + f"{base64.b64encode(bytes(32)).decode()}\n" * 64 + "\nx\n",
    "no blank line": "old 10\n",
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_malformed_requests_are_refused(name: str) -> None:
    with pytest.raises(WitnessError):
        WitnessRequest.parse(BAD_REQUESTS[name])


def test_dispute_refuses_a_stored_checkpoint_behind_the_head(setup: Setup) -> None:
    setup.ingest("first.jsonl", FIRST)
    setup.cosign_and_keep(setup.request(0, "r1.txt"))
    setup.ingest("rest.jsonl", REST)
    code, _, err = run(
        "dispute",
        "--db",
        setup.url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-acme-01",
        "--key",
        str(setup.key),
        "--out",
        str(setup.folder / "p.json"),
        "--stored-checkpoint",
    )
    assert code == 2 and err == (
        "Error: --stored-checkpoint: the latest checkpoint #1 has size 10, the store's head is "
        "seq 24: sign (and have witnesses cosign) a new one first\n"
    )


def test_a_changed_cosignature_fails(tmp_path: Path) -> None:
    witness = Signer("w.example", bytes(range(32)), COSIGNATURE_V1)
    log = Signer(ORIGIN, bytes(32))
    note = log.sign(f"{ORIGIN}\n1\n{base64.b64encode(bytes(32)).decode()}\n")
    line = cosign(witness, note.partition("\n\n")[0] + "\n", 1_700_000_000)
    assert verify_cosignature(note + line, witness.verifier) == 1_700_000_000
    blob = bytearray(base64.b64decode(line.rsplit(" ", 1)[1]))
    blob[11] ^= 1  # the timestamp's last byte: the signature no longer matches
    changed = line.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(blob)).decode() + "\n"
    with pytest.raises(CosignatureError, match="does not match the checkpoint"):
        verify_cosignature(note + changed, witness.verifier)


def test_cosignatures_are_append_only(setup: Setup) -> None:
    setup.ingest("first.jsonl", FIRST)
    setup.cosign_and_keep(setup.request(0, "r1.txt"))
    with pytest.raises(Exception, match="append-only"):
        with Store(setup.url).engine.begin() as conn:
            conn.execute(text("UPDATE cosignatures SET timestamp = 0"))


def test_verify_checks_the_cosignatures_kept_in_the_store(setup: Setup) -> None:
    setup.ingest("first.jsonl", FIRST)
    setup.cosign_and_keep(setup.request(0, "r1.txt"))
    assert run("verify", "--db", setup.url, "--pubkey", f"{setup.key}.pub")[0] == 0
    with Store(setup.url).engine.begin() as conn:
        drop_guards(conn)
        line = conn.execute(text("SELECT line FROM cosignatures")).scalar_one()
        blob = bytearray(base64.b64decode(line.rstrip("\n").rsplit(" ", 1)[1]))
        blob[-1] ^= 1
        conn.execute(
            text("UPDATE cosignatures SET line = :l"),
            {"l": line.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(blob)).decode() + "\n"},
        )
    code, _, err = run("verify", "--db", setup.url, "--pubkey", f"{setup.key}.pub")
    assert code == 1 and err == (
        "FAILED at seq 10: cosignature: checkpoint #1: the cosignature by witness.example/w1 "
        "does not match the checkpoint\n"
    )


def test_the_witness_key_is_shown_again_and_never_renamed(setup: Setup) -> None:
    assert (
        setup.ok("keygen", "--show", str(setup.state / "witness.key"))
        == setup.witness_pub.read_text()
    )
    assert setup.witness_pub.read_text().startswith("witness.example/w1+")
    code, _, err = run(
        "witness", "init", "--state", str(setup.state), "--name", "witness.example/other"
    )
    assert code == 2 and err == (
        f"Error: --name: the witness in {setup.state} is already named 'witness.example/w1'; "
        "a key's name never changes\n"
    )
