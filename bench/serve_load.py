"""`gpuledger serve` under load on loopback: N concurrent clients for D seconds against a
real uvicorn, beside its baseline (the same document computed in-process, no HTTP).

Routes exercised, round robin per client: a tenant's reconciliation, its promises report,
its invoices page, and a collector posting a batch of 10 events (the one write path).
Reported: requests, errors (any status but 200), p50/p95/p99 latency per route, the
ratio of the API's p50 to the in-process p50 of the same document (what HTTP, auth and
JSON add), and the CPUs and the 1-minute load average before and after the run (a shared
machine's other work slows every figure).

    python -m bench.serve_load                 # 50 clients × 30 s on the demo fleet
    python -m bench.serve_load --clients 8 --seconds 5
    python -m bench.serve_load --collector-tenant other   # the collector posts another's

With `--collector-tenant same` (the default) every post renews the reading tenant's
documents (its head moved); with `other` they stay cached (reconcile/serve/cache.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

from bench.results_file import record


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else 0.0


def _client(
    base: str,
    tokens: dict[str, str],
    poster: str,
    stop: float,
    n: int,
    latencies: dict[str, list[float]],
    errors: dict[str, int],
    lock: threading.Lock,
) -> None:
    routes = ["reconciliation", "promises", "invoices", "post"]
    k = n
    while time.monotonic() < stop:
        route = routes[k % len(routes)]
        k += 1
        if route == "post":
            batch = [
                {
                    "specversion": "1.0",
                    "id": f"load-{n}-{k}-{i}",
                    "source": f"app://{poster}/load",
                    "type": "job.progress",
                    "time": "2026-01-05T11:00:00Z",
                    "data": {"tenant": poster, "job_id": "load", "step": k * 10 + i},
                }
                for i in range(10)
            ]
            request = urllib.request.Request(
                f"{base}/api/v1/events", json.dumps(batch).encode(), method="POST"
            )
            request.add_header("Content-Type", "application/cloudevents-batch+json")
            request.add_header("Authorization", f"Bearer {tokens['collector']}")
        else:
            path = {
                "reconciliation": "/api/v1/reconciliation",
                "promises": "/api/v1/reports/promises",
                "invoices": "/invoices",
            }[route]
            request = urllib.request.Request(base + path)
            request.add_header("Authorization", f"Bearer {tokens['tenant']}")
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                ok = response.status == 200
        except (urllib.error.URLError, OSError):
            ok = False
        elapsed = time.perf_counter() - started
        with lock:
            latencies[route].append(elapsed)
            if not ok:
                errors[route] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--days", type=int, default=3, help="days of the simulated fleet")
    parser.add_argument(
        "--collector-tenant",
        choices=("same", "other"),
        default="same",
        help="whose events the collector posts: the reading tenant's (each post renews its "
        "documents), or another tenant's (recorded as serve_load_other_tenant)",
    )
    args = parser.parse_args()

    import reconcile
    from fixtures.sim import SimConfig, simulate
    from ledger import Store, read
    from ledger.tokens import Role, create
    from reconcile import reports
    from schemas.owners import Owner
    from tests.conftest import run_cli
    from tests.serve_helpers import serving

    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        manifest = simulate(SimConfig(days=args.days), tmp / "sim")
        url = f"sqlite:///{tmp / 'ledger.db'}"
        run_cli("init", "--db", url)
        run_cli("ingest", "--db", url, "--manifest", str(tmp / "sim" / "manifest.json"))
        del manifest
        store = Store(url)
        tenant = reconcile.reconcile_store(store).invoices()[0].tenant
        others = [t for t in read.tenants(store) if t != tenant]
        poster = tenant if args.collector_tenant == "same" else others[0]
        tokens = {
            "tenant": create(store, Role("tenant", tenant))[1],
            "collector": create(store, Role("collector", f"app://{poster}"), Owner(poster))[1],
        }
        baseline: list[float] = []
        for _ in range(
            5
        ):  # the same documents in-process: what the API's answers cost without HTTP
            started = time.perf_counter()
            reconcile.reconcile_store(store, tenant).as_json()
            reports.report(store, "promises", tenant)
            baseline.append((time.perf_counter() - started) / 2)
        latencies: dict[str, list[float]] = defaultdict(list)
        errors: dict[str, int] = defaultdict(int)
        lock = threading.Lock()
        load_before = os.getloadavg()[0]
        with serving(store) as base:
            stop = time.monotonic() + args.seconds
            clients = [
                threading.Thread(
                    target=_client,
                    args=(base, tokens, poster, stop, n, latencies, errors, lock),
                )
                for n in range(args.clients)
            ]
            for c in clients:
                c.start()
            for c in clients:
                c.join()
        load_after = os.getloadavg()[0]
        store.close()
    every = [x for values in latencies.values() for x in values]
    reads = latencies["reconciliation"] + latencies["promises"]
    result = {
        "clients": args.clients,
        "seconds": args.seconds,
        "fleet_days": args.days,
        "collector_posts_for": f"{args.collector_tenant} tenant",
        "tenants": {"reads": tenant, "posts": poster},
        "requests": len(every),
        "errors": sum(errors.values()),
        "requests_per_s": round(len(every) / args.seconds, 1),
        "routes": {
            route: {
                "requests": len(values),
                "errors": errors[route],
                "p50_ms": round(1000 * _percentile(values, 0.5), 1),
                "p95_ms": round(1000 * _percentile(values, 0.95), 1),
                "p99_ms": round(1000 * _percentile(values, 0.99), 1),
            }
            for route, values in sorted(latencies.items())
        },
        "in_process_document_p50_ms": round(1000 * statistics.median(baseline), 1),
        "api_read_p50_ms": round(1000 * _percentile(reads, 0.5), 1),
        # the machine is not the bench's alone (other processes share its CPUs): the load
        # average either side of the run says how much was the bench's
        "cpus": os.cpu_count(),
        "load_average_1m": [round(load_before, 2), round(load_after, 2)],
    }
    result["ratio_api_to_in_process_p50"] = round(
        result["api_read_p50_ms"] / max(result["in_process_document_p50_ms"], 0.001), 2
    )
    record("serve_load" if args.collector_tenant == "same" else "serve_load_other_tenant", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
