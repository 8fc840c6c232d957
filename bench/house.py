"""The house's cost on the user's path: today's commands beside the same commands before the
pipeline and typed documents (`python -m bench.house [--gpus N --days D --rounds R]
[--baseline COMMIT] [--head COMMIT]`).

Issue 27 moved every relation into one declared pipeline and every result into a typed
document validated at the boundary. Both could cost time where the user waits, so this
times the user's own commands (reconcile to JSON, report promises, dispute, verify-packet)
at HEAD and at BASELINE (the commit before the pipeline), each in a child process on a
store of the same fleet. The baseline runs from a temporary git worktree; each side
ingests its own store with its own code (the store format is not what is measured).
Rounds alternate A, B, A, B so that a busy neighbour slows both sides alike; the figure is
the ratio of median CPU seconds (children's user + system), HEAD over BASELINE.
`--head c04baea` times the commit that brought the pipeline instead of the working tree:
the house's own cost, without the features built on it since.
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


def _checkout(commit: str, where: Path) -> Path:
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(where), commit], cwd=ROOT, check=True
    )
    return where


def measure(
    shape: Shape, rounds: int, baseline: str = BASELINE, head: str | None = None
) -> dict[str, Any]:
    """`head` None: the working tree; else that commit, checked out beside the baseline."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-house-") as tmp:
        folder = Path(tmp)
        base = _checkout(baseline, folder / "baseline")
        top = ROOT if head is None else _checkout(head, folder / "head")
        try:
            parquet, fleet = folder / "fleet.parquet", folder / "fleet.jsonl"
            write_fleet(parquet, shape)
            events, _ = write_jsonl(parquet, fleet)
            sides = {"head": top, "baseline": base}
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
            for tree in {base, top} - {ROOT}:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
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
        "baseline": baseline,
        "head": head or "working tree",
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE, help="the commit compared against")
    parser.add_argument("--head", help="a commit to time instead of the working tree")
    args = parser.parse_args(argv)
    result = measure(Shape(args.gpus, args.days), args.rounds, args.baseline, args.head)
    name = f"house_{args.gpus}gpus_{args.days}d" + (f"_{args.head}" if args.head else "")
    record(name, result)
    for command, step in result["steps"].items():
        print(f"{command}: {step}", flush=True)


if __name__ == "__main__":
    main()
