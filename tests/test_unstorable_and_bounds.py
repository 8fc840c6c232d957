"""Bad input loses nothing else: a record a backend cannot store (a NUL in a column) is
quarantined on both backends with the rest appended, and a quarantined record is kept as
its first 64 KiB with the SHA-256 and length of the whole, however long it is."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from ingest.base import MAX_LINE_BYTES, LongLine, bounded_lines
from ingest.worker import _pack, _unpack
from ledger import Appender, Store, verify_ledger
from ledger.quarantine import quarantine_problem, storable_text
from ledger.tables import quarantine
from schemas import Origin, Rejected
from schemas.records import RECORD_HEAD
from tests.conftest import progress, run_cli, write_jsonl
from tests.test_write_rights import quarantine_rows, stored

NUL = "\x00"


def with_nul(where: str) -> dict[str, Any]:
    """acme's p2 with one NUL in the named place."""
    base = progress(2)
    if where == "id":
        return base | {"id": f"p{NUL}2"}
    if where == "source":
        return base | {"source": f"test://fl{NUL}eet"}
    if where == "tenant":
        return base | {"data": {"tenant": f"ac{NUL}me", "job_id": "j1", "step": 2}}
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["id", "source", "tenant"])
def test_a_nul_in_a_column_quarantines_that_record_and_appends_the_rest(
    tmp_path: Path, db_url: str, where: str
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [progress(1), with_nul(where), progress(3)])
    code, out, err = run_cli("ingest", "--db", db_url, str(path))
    assert (code, out) == (1, f"{path}: read 3 · appended 2 · duplicate 0 · quarantined 1\n")
    field = "data.tenant" if where == "tenant" else where
    assert err.startswith(f"{path}:2: {field}: holds a NUL character (\\u0000)")
    assert [i for _, _, i, _ in stored(db_url)] == ["p1", "p3"]
    [row] = quarantine_rows(db_url)
    assert (row["line"], row["field"], bytes(row["record"])) == (
        2,
        field,
        orjson.dumps(with_nul(where)),
    )
    code, out, _ = run_cli("ingest", "--db", db_url, str(path))  # again: nothing twice
    assert (code, out) == (1, f"{path}: read 3 · appended 0 · duplicate 2 · quarantined 1\n")
    assert len(quarantine_rows(db_url)) == 1 and len(stored(db_url)) == 2
    assert verify_ledger(Store(db_url)).ok


def test_a_nul_inside_the_event_is_stored_escaped_in_its_canonical_body(
    tmp_path: Path, db_url: str
) -> None:
    """A NUL in a data value or a field name is text JSON escapes: the event is kept."""
    odd = progress(1) | {
        "data": {"tenant": "acme", "job_id": f"j{NUL}1", "step": 1, f"no{NUL}te": f"x{NUL}"},
        f"ext{NUL}attr": "y",
    }
    path = write_jsonl(tmp_path / "e.jsonl", [odd])
    code, _, _ = run_cli("ingest", "--db", db_url, str(path))
    assert code == 0
    code, out, _ = run_cli("export", "--db", db_url)
    assert '"job_id":"j\\u00001"' in out and '"no\\u0000te":"x\\u0000"' in out
    assert verify_ledger(Store(db_url)).ok


def test_a_quarantine_row_holding_a_nul_or_a_lone_surrogate_is_stored_on_every_backend(
    store: Store,
) -> None:
    bad = Rejected(
        Origin("f.jsonl", 7), f"data.a{NUL}b", f"reason {NUL} and \udc80", b"raw\x00bytes"
    )
    assert Appender(store).append([bad]).quarantined == 1
    with store.reading() as conn:
        row = conn.execute(select(quarantine)).mappings().one()
        assert quarantine_problem(conn, []) is None
    assert (row["field"], row["reason"]) == ("data.a\\u0000b", "reason \\u0000 and \\udc80")
    assert bytes(row["record"]) == b"raw\x00bytes"  # the record itself is bytes, kept as read
    assert storable_text("plain é") == "plain é"


# -- the bound ----------------------------------------------------------------------------


def test_bounded_lines_hand_on_short_lines_whole_and_only_the_head_of_a_long_one() -> None:
    long = b"{" + b"x" * 300 + b"}"
    stream = io.BytesIO(b'{"a":1}\n' + long + b"\n" + b"tail-without-newline")
    found = list(bounded_lines(stream, limit=100))
    assert found[0] == b'{"a":1}\n'
    assert found[1] == LongLine(
        long, hashlib.sha256(long).digest(), 302, 303
    )  # its head: all 302 < 64 KiB
    assert found[2] == b"tail-without-newline"
    ending = list(bounded_lines(io.BytesIO(long), limit=100))  # a long last line with no newline
    assert ending == [LongLine(long, hashlib.sha256(long).digest(), 302, 302)]
    longer = b"z" * 70_000  # read in pieces of 100, its head gathered up to 64 KiB
    assert list(bounded_lines(io.BytesIO(longer + b"\n"), limit=100)) == [
        LongLine(b"z" * RECORD_HEAD, hashlib.sha256(longer).digest(), 70_000, 70_001)
    ]
    exact = list(
        bounded_lines(io.BytesIO(b"y" * 99 + b"\n"), limit=100)
    )  # exactly the limit, newline included
    assert exact == [b"y" * 99 + b"\n"]


def test_a_cut_record_crosses_the_parsing_pipe_with_its_digest_and_length() -> None:
    cut = Rejected(Origin("f", 2, 9), "(record)", "long", b"head", b"d" * 32, 5_000_000)
    assert _unpack(_pack(cut)) == cut
    plain = Rejected(Origin("f", 3, 10), "id", "bad", b"whole")
    assert _unpack(_pack(plain)) == plain


def big_line(size: int) -> bytes:
    """A line of `size` bytes that starts like an event."""
    start = (
        b'{"specversion":"1.0","id":"huge","source":"test://fleet","type":"job.progress",'
        b'"data":{"pad":"'
    )
    return start + b"a" * (size - len(start) - 3) + b'"}}'


@pytest.mark.parametrize(
    "size", [5_000_000, 2_000_000]
)  # past the line limit, and under it but over 1 MiB
def test_a_huge_line_is_stored_as_its_first_64_kib_and_the_digest_of_the_whole(
    tmp_path: Path, db_url: str, size: int
) -> None:
    line = big_line(size)
    path = tmp_path / "e.jsonl"
    path.write_bytes(
        orjson.dumps(progress(1)) + b"\n" + line + b"\n" + orjson.dumps(progress(3)) + b"\n"
    )
    code, out, err = run_cli("ingest", "--db", db_url, str(path))
    assert (code, out) == (1, f"{path}: read 3 · appended 2 · duplicate 0 · quarantined 1\n")
    [row] = quarantine_rows(db_url)
    assert bytes(row["record"]) == line[:65536]
    assert (bytes(row["record_hash"]), row["record_length"]) == (
        hashlib.sha256(line).digest(),
        size,
    )
    assert row["line"] == 2
    if size > MAX_LINE_BYTES:
        assert err.startswith(
            f"{path}:2: (record): the record is 5,000,000 bytes, over the 4,194,304 a line or JSON"
        )
    code, listing, _ = run_cli("quarantine", "--db", db_url, "--format", "json")
    [shown] = json.loads(listing)
    assert (code, shown["record_length"], len(shown["record"])) == (0, size, 65536)
    assert run_cli("quarantine", "--db", db_url)[0] == 0
    code, out, _ = run_cli(
        "ingest", "--db", db_url, str(path)
    )  # again: the same row, not a second
    assert (code, len(quarantine_rows(db_url))) == (1, 1)
    assert verify_ledger(Store(db_url)).ok


def test_a_signed_checkpoint_commits_to_the_bounded_rows(tmp_path: Path, db_url: str) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(orjson.dumps(progress(1)) + b"\n" + big_line(5_000_000) + b"\n")
    run_cli("ingest", "--db", db_url, str(path))
    key = tmp_path / "k"
    assert run_cli("keygen", "--out", str(key))[0] == 0
    code, out, err = run_cli("checkpoint", "--db", db_url, "--key", str(key))
    assert code == 0, err
    code, out, err = run_cli("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert code == 0, err
    assert "quarantine chain" in out
    store = Store(db_url)
    with store.writing() as conn:  # an edited bound is caught: the length is in the chained row
        conn.exec_driver_sql(
            "DROP TRIGGER IF EXISTS quarantine_no_update"
        ) if store.dialect == "sqlite" else conn.exec_driver_sql(
            "ALTER TABLE quarantine DISABLE TRIGGER USER"
        )
        conn.exec_driver_sql("UPDATE quarantine SET record_length = 12")
    code, out, err = run_cli("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert code != 0 and "quarantine" in (out + err)


@pytest.mark.parametrize("shape", ["array", "objects"])
def test_a_huge_json_value_is_kept_bounded_and_never_parsed(
    tmp_path: Path, db_url: str, shape: str
) -> None:
    """A batch file (one JSON array) or pretty-printed objects: the value past the limit is
    quarantined as its head and digest, the others are appended."""
    huge = big_line(5_000_000)
    values = [orjson.dumps(progress(1)), huge, orjson.dumps(progress(3))]
    path = tmp_path / "e.json"
    if shape == "array":
        path.write_bytes(b"[\n" + b",\n".join(values) + b"\n]\n")
    else:
        path.write_bytes(
            b"\n".join(orjson.dumps(orjson.loads(v), option=orjson.OPT_INDENT_2) for v in values)
            + b"\n"
        )
        huge = orjson.dumps(orjson.loads(huge), option=orjson.OPT_INDENT_2)
    code, out, _ = run_cli("ingest", "--db", db_url, str(path))
    assert (code, out) == (1, f"{path}: read 3 · appended 2 · duplicate 0 · quarantined 1\n")
    [row] = quarantine_rows(db_url)
    assert bytes(row["record"]) == huge[:65536]
    assert (bytes(row["record_hash"]), row["record_length"]) == (
        hashlib.sha256(huge).digest(),
        len(huge),
    )
