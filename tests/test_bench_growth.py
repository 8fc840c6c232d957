"""bench.e2e.growth: how each step of the user's path grows across 1x, 2x, 4x the events."""

from __future__ import annotations

from typing import Any

from bench.e2e import growth


def _run(
    events: int, days: int, ingest: tuple[float, float], checkpoint: tuple[float, float]
) -> dict[str, Any]:
    def step(wall: float, cpu: float) -> dict[str, Any]:
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": 100.0}

    return {
        "events": events,
        "days": days,
        "gpus": 8,
        "backend": "sqlite",
        "store_bytes_per_event": 540,
        "loadavg_1m": 1.0,
        "reconcile_parquet": {"seconds": 0.5 * days},
        "steps": {"ingest": step(*ingest), "checkpoint": step(*checkpoint)},
    }


def test_a_linear_step_plus_a_fixed_cost_has_a_flat_marginal_cost_a_constant_one_zero() -> None:
    # ingest: 1 s fixed + 20 µs an event; checkpoint: 0.9 s at any size
    runs = [
        _run(100_000, 1, (3.0, 3.0), (0.9, 0.9)),
        _run(200_000, 2, (5.0, 5.0), (0.9, 0.9)),
        _run(400_000, 4, (9.0, 9.0), (0.9, 0.9)),
    ]
    scaled = growth(runs)
    assert scaled["events_over_first"] == [1.0, 2.0, 4.0]
    ingest = scaled["steps"]["ingest"]
    assert ingest["cpu_over_first"] == [1.0, 1.67, 3.0]  # 5/3 and 9/3
    assert ingest["marginal_cpu_us_an_event"] == [20.0, 20.0]  # 2 s over 100,000; 4 s over 200,000
    checkpoint = scaled["steps"]["checkpoint"]
    assert checkpoint["wall_over_first"] == [1.0, 1.0, 1.0]
    assert checkpoint["marginal_cpu_us_an_event"] == [0.0, 0.0]
    assert scaled["reconcile_parquet_over_first"] == [1.0, 2.0, 4.0]


def test_a_step_that_grows_faster_than_its_events_shows_a_rising_marginal_cost() -> None:
    # quadratic: 1e-10 s times events squared
    runs = [
        _run(n, d, (1e-10 * n * n,) * 2, (1.0, 1.0))
        for n, d in ((100_000, 1), (200_000, 2), (400_000, 4))
    ]
    ingest = growth(runs)["steps"]["ingest"]
    assert ingest["cpu_over_first"] == [1.0, 4.0, 16.0]
    # (4 - 1) s over 100,000 events, then (16 - 4) s over 200,000
    assert ingest["marginal_cpu_us_an_event"] == [30.0, 60.0]
