"""The house's cost on the user's path: today's commands beside the same commands before the
pipeline and typed documents (`python -m bench.house [--gpus N --days D --rounds R]`).

Issue 27 moved every relation into one declared pipeline and every result into a typed
document validated at the boundary. Both could cost time where the user waits, so this
times the user's own commands (reconcile to JSON, report promises, dispute, verify-packet)
at HEAD and at BASELINE (the commit before the pipeline), each in a child process on a
store of the same fleet. The baseline runs from a temporary git worktree; each side
ingests its own store with its own code (the store format is not what is measured).
Rounds alternate A, B, A, B so that a busy neighbour slows both sides alike; the figure is
the ratio of median CPU seconds (children's user + system), HEAD over BASELINE.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.e2e import TENANT, _children_cpu, write_jsonl
from bench.reconcile import Shape, write_fleet
from bench.results_file import record

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "4658046"  # reports: numbers.py, the last commit before the declared pipeline


def _run(code: Path, args: list[str]) -> float:
    """One CLI command run from `code`'s tree; its CPU seconds."""
    before = _children_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=code, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{code.name} {args[0]}: exit {done.returncode}: {done.stderr[-600:]}")
    return _children_cpu() - before


def _commands(folder: Path, db: str, key: Path) -> dict[str, list[str]]:
    return {
        "reconcile_json": [
            "reconcile",
            "--db",
            db,
            "--format",
            "json",
            "--out",
            str(folder / "r.json"),
        ],
        "report_promises": [
            "report",
            "promises",
            "--db",
            db,
            "--format",
            "json",
            "--out",
            str(folder / "p.json"),
        ],
        "dispute": [
            "dispute",
            "--db",
            db,
            "--tenant",
            TENANT,
            "--invoice",
            f"INV-{TENANT}",
            "--key",
            str(key),
            "--out",
            str(folder / "packet.json"),
        ],
        "verify_packet": ["verify-packet", str(folder / "packet.json"), "--pubkey", f"{key}.pub"],
    }


def _prepare(code: Path, folder: Path, fleet: Path) -> dict[str, list[str]]:
    folder.mkdir()
    db, key = f"sqlite:///{folder / 'ledger.db'}", folder / "log.key"
    _run(code, ["keygen", "--out", str(key), "--name", "bench.example/log"])
    _run(code, ["ingest", "--db", db, str(fleet)])
    _run(code, ["checkpoint", "--db", db, "--key", str(key)])
    return _commands(folder, db, key)


def measure(shape: Shape, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-house-") as tmp:
        folder = Path(tmp)
        base = folder / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base), BASELINE], cwd=ROOT, check=True
        )
        try:
            parquet, fleet = folder / "fleet.parquet", folder / "fleet.jsonl"
            write_fleet(parquet, shape)
            events, _ = write_jsonl(parquet, fleet)
            sides = {"head": ROOT, "baseline": base}
            commands = {
                name: _prepare(code, folder / f"store-{name}", fleet)
                for name, code in sides.items()
            }
            cpu: dict[str, dict[str, list[float]]] = {
                s: {c: [] for c in commands["head"]} for s in sides
            }
            for _ in range(rounds):
                for command in commands["head"]:
                    for side, code in sides.items():
                        cpu[side][command].append(_run(code, commands[side][command]))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    steps = {
        command: {
            "head_cpu_s": round(statistics.median(cpu["head"][command]), 3),
            "baseline_cpu_s": round(statistics.median(cpu["baseline"][command]), 3),
            "ratio": round(
                statistics.median(cpu["head"][command])
                / statistics.median(cpu["baseline"][command]),
                2,
            ),
        }
        for command in cpu["head"]
    }
    return {
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "rounds": rounds,
        "baseline": BASELINE,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    result = measure(Shape(args.gpus, args.days), args.rounds)
    record(f"house_{args.gpus}gpus_{args.days}d", result)
    for command, step in result["steps"].items():
        print(f"{command}: {step}", flush=True)


if __name__ == "__main__":
    main()
