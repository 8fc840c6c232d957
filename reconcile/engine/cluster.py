"""The reconciliation's partitions on a Ray cluster (docs/scale.md).

`local[N]` starts a Ray cluster on this machine with N workers (and stops it after);
`ray://HOST:PORT` connects to a running one through Ray Client (a KubeRay cluster's head
service, port 10001). Each partition of `reconcile.engine.partitions` is one Ray task:
it opens the store itself, reads its tenants' slice (sealed pages, then rows) up to the
snapshot's seq, reconciles it with DuckDB and sends back its cells; the merge here gives
the single process's answer, byte for byte.

The workers reach the store by its URL, so the store must be one they can reach: a
PostgreSQL server, or a SQLite file on this machine for `local[N]`. Ray is imported only
when a cluster is asked for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

from ledger import Store
from reconcile.engine.partitions import merge, plan, reconcile_partition
from reconcile.engine.result import Reconciliation
from schemas.errors import BadInput

_LOCAL = re.compile(r"local\[([1-9][0-9]{0,3})\]")
_REMOTE = re.compile(r"ray://[^\s/:]+(:[0-9]{1,5})?")

#: DuckDB threads each task uses: one task a worker, one worker a CPU.
TASK_THREADS = 1


class ClusterError(BadInput, ValueError):
    """A cluster that cannot be named, reached or used; the message says which and why."""


@dataclass(frozen=True)
class Cluster:
    """Where partitions run: `workers` local CPUs, or the Ray cluster at `address`."""

    address: str | None  # ray://HOST:PORT, or None for a local cluster
    workers: int  # local[N]'s N; for a remote cluster, how many CPUs it has (0: not asked)

    @property
    def name(self) -> str:
        return self.address if self.address is not None else f"local[{self.workers}]"


def _ray() -> Any:
    """Ray, imported when a cluster is asked for (its API is untyped: held as Any)."""
    import ray

    return ray


def parse_cluster(spec: str) -> Cluster:
    """`local[N]` (N from 1) or `ray://HOST:PORT`."""
    local = _LOCAL.fullmatch(spec.strip())
    if local:
        return Cluster(None, int(local.group(1)))
    if _REMOTE.fullmatch(spec.strip()):
        return Cluster(spec.strip(), 0)
    raise ClusterError(f"cluster {spec!r}: expected local[N] (N workers here) or ray://HOST:PORT")


@contextmanager
def connected(cluster: Cluster) -> Iterator[int]:
    """Ray connected to `cluster` for the block; yields how many CPUs it offers. A Ray
    already connected in this process (a test session's) is used as it is and left up."""
    ray = _ray()
    if ray.is_initialized():
        yield max(1, int(ray.cluster_resources().get("CPU", 1)))
        return
    try:
        if cluster.address is None:
            ray.init(
                num_cpus=cluster.workers,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        else:
            ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cluster {cluster.name}: cannot connect: {exc}") from exc
    try:
        yield max(1, int(ray.cluster_resources().get("CPU", 1)))
    finally:
        ray.shutdown()


def worker_url(store: Store) -> str:
    """The store's URL as a worker opens it: a SQLite file by its absolute path (a worker
    runs in a folder of its own). A SQLite store in memory cannot be shared."""
    if store.in_memory:
        raise ClusterError("a SQLite store in memory cannot be read by a cluster's workers")
    url = make_url(store.url)
    if store.dialect == "sqlite" and url.database and not os.path.isabs(url.database):
        url = url.set(database=os.path.abspath(url.database))
    return url.render_as_string(hide_password=False)


def reconcile_on_cluster(
    store: Store,
    cluster: Cluster,
    tenant: str | None = None,
    invoice: str | None = None,
    threads: int = TASK_THREADS,
) -> Reconciliation:
    """The reconciliation of `store` (optionally one tenant's, one invoice's lines) with its
    partitions run as Ray tasks on `cluster`; the same answer as `reconcile_store`."""
    ray = _ray()
    url = worker_url(store)
    with connected(cluster) as cpus:
        layout = plan(store, cpus, tenant)
        task: Any = ray.remote(num_cpus=1, max_retries=1)(reconcile_partition)
        futures = [
            task.remote(url, part.tenants, layout.upto_seq, threads, invoice)
            for part in layout.partitions
        ]
        try:
            results = ray.get(futures)
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        return merge(results, invoice)
