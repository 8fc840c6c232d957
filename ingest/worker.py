"""Parsing in a second process, beside the appends: `extract_parallel()` yields the same
records as `extract()`, made by a child process (`python -m ingest.worker`) that reads,
validates and encodes while this one hashes and writes. On two free cores an ingest's
wall time falls by about a third; on a machine with no core to spare it rises (the
hand-over is work too), and on one core the child is never started.

Records cross the pipe as plain tuples, a chunk at a time, each chunk a length and a
pickle (a pickled dataclass costs more than the parsing it would save). A reader thread
keeps a few chunks ahead; past that the child blocks, so memory stays bounded. Whole-file errors
come back as
IngestError; a child that dies is an IngestError with its last words; closing the
iterator early, or this process dying, stops the child (it meets a closed pipe). Small
files are parsed in this process: a child's start-up would cost more than it saves.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ingest import configure, expect_records, extract
from ingest.base import IngestError
from schemas import Accepted, Origin, Record, Rejected
from schemas.owners import owned

#: Files smaller than this are parsed in this process.
MIN_BYTES = 16 << 20
_CHUNK = 2000
_AHEAD = 8  # chunks read ahead of the appends: 16000 records, about 4 MiB
_LENGTH = struct.Struct("<Q")
_Packed = tuple[Any, ...]


def extract_parallel(path: Path, name: str | None = None, **options: Any) -> Iterator[Record]:
    """The records of one source file, in file order, parsed by a child process when the
    file is large enough (MIN_BYTES) to repay starting one. The owner's rights (option
    `owner`) are applied here, so the child never needs them."""
    # identification and the options' checks (and their errors) stay here
    configured = configure(path, name, **options)
    ingestor, options = configured.ingestor, configured.kwargs()
    # A function (dcgm-metrics' `recorded`, a look-up in this process's ledger) cannot cross
    # the pipe: an ingestor that reads one parses here, the others do not need it.
    functions = {key for key, value in options.items() if callable(value)}
    if (
        (os.cpu_count() or 1) < 2
        or not path.is_file()
        or path.stat().st_size < MIN_BYTES
        or (functions and getattr(ingestor, "reads_ledger", False))
    ):
        records = ingestor.extract(path, **options)
    else:
        records = _from_child(
            path, ingestor.name, {k: v for k, v in options.items() if k not in functions}
        )
    checked = records if configured.claimed else expect_records(records, path, ingestor.name)
    return owned(checked, configured.owner)


def _from_child(path: Path, name: str, options: dict[str, Any]) -> Iterator[Record]:
    command = [sys.executable, "-m", "ingest.worker", str(path), name, json.dumps(options)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    reader = _Reader(child.stdout)
    reader.start()
    try:
        while True:
            body = reader.chunks.get()
            if not body:
                raise IngestError(
                    f"{path}: the parsing process stopped (exit code {child.wait()}): "
                    f"{_last_words(child)}"
                )
            kind, payload = pickle.loads(body)
            if kind == "records":
                yield from (_unpack(item) for item in payload)
            elif kind == "error":  # the message and the option it is about
                raise IngestError(payload[0], option=payload[1])
            else:
                return
    finally:
        reader.stopped.set()
        if child.poll() is None:
            child.kill()
        reader.join()
        child.wait()
        child.stdout.close()
        child.stderr.close()


class _Reader(threading.Thread):
    """Drains the child's pipe into a queue of up to _AHEAD chunks: with the pipe's own
    buffer alone (64 KiB, a tenth of a batch) the child would wait for each append to end
    before parsing on, and the two processes would take turns instead of working together.
    Reading releases the GIL; an empty chunk is the end of the stream."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True, name="gpuledger-parse-reader")
        self.stream = stream
        self.chunks: queue.Queue[bytes] = queue.Queue(maxsize=_AHEAD)
        self.stopped = threading.Event()

    def run(self) -> None:
        body = b"-"
        while body and not self.stopped.is_set():
            head = self.stream.read(_LENGTH.size)
            body = self.stream.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
            while not self.stopped.is_set():
                try:
                    self.chunks.put(body, timeout=0.1)
                    break
                except queue.Full:
                    continue


def _last_words(child: subprocess.Popen[bytes]) -> str:
    assert child.stderr is not None
    return (child.stderr.read().decode(errors="replace").strip().splitlines() or ["no message"])[
        -1
    ]


def _pack(record: Record) -> _Packed:
    origin = record.origin
    if isinstance(record, Accepted):
        return (
            record.source,
            record.id,
            record.type,
            record.tenant,
            record.body,
            origin.file,
            origin.line,
            origin.offset,
        )
    return (
        tuple(origin),
        record.field,
        record.reason,
        record.record,
        record.digest,
        record.length,
    )


_TUPLE = tuple.__new__  # a named tuple made from its values without the keyword-taking __new__


def _unpack(item: _Packed) -> Record:
    if len(item) == 8:
        return _TUPLE(
            Accepted, (item[0], item[1], item[2], item[3], item[4], _TUPLE(Origin, item[5:]))
        )
    return _TUPLE(Rejected, (_TUPLE(Origin, item[0]), *item[1:]))


def _send(out: IO[bytes], kind: str, payload: Any) -> None:
    body = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LENGTH.pack(len(body)))
    out.write(body)


def _produce(path: str, name: str, options: dict[str, Any], out: IO[bytes]) -> None:
    chunk: list[_Packed] = []
    try:
        for record in extract(Path(path), name, **options):
            chunk.append(_pack(record))
            if len(chunk) == _CHUNK:
                _send(out, "records", chunk)
                chunk = []
        _send(out, "records", chunk)
        _send(out, "end", None)
    except IngestError as exc:
        _send(out, "error", (str(exc), exc.option))
    out.flush()


if __name__ == "__main__":
    try:
        _produce(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.stdout.buffer)
    except BrokenPipeError:  # the reader has gone: nothing left to do
        sys.stderr.close()
        sys.exit(1)
