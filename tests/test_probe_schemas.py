"""The placement.observed and probe.result models: figures are bounded decimal strings,
links come from nvidia-smi's legend, parts are closed, a matrix has its declared shape."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas import Origin, canonical_event, rejections, validate_event
from tests.conftest import event

PROBE: dict[str, Any] = {
    "tenant": "t",
    "allocation_id": "a",
    "probe": "nvbandwidth",
    "test": "t1",
    "figures": [{"name": "sum", "value": "121.93", "unit": "GB/s"}],
}
PLACEMENT: dict[str, Any] = {
    "tenant": "t",
    "allocation_id": "a",
    "node": "n1",
    "topology": {
        "gpus": [{"name": "GPU0"}, {"name": "GPU1"}],
        "nics": [],
        "links": [{"a": "GPU0", "b": "GPU1", "link": "NV18"}],
    },
}


def error_of(type_: str, data: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        validate_event(event(type_, "e1", data))
    rejected = rejections(info.value, Origin("f", 1), b"raw")
    return rejected.field, rejected.reason


def figure(value: Any) -> dict[str, Any]:
    return dict(PROBE, figures=[{"name": "busbw", "value": value, "unit": "GB/s"}])


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "money must be a decimal string, not a float: 1.5"),
        ("-0.5", "a measured figure is never negative: -0.5"),
        ("0.0000000000000000001", "1E-19 has more than 18 digits before or after the point"),
        (
            "1000000000000000000",
            "1000000000000000000 has more than 18 digits before or after the point",
        ),
        ("inf", "not a decimal string: 'inf'"),
    ],
)
def test_a_figure_is_a_bounded_decimal_string(value: Any, reason: str) -> None:
    assert error_of("probe.result", figure(value)) == ("data.figures[0].value", reason)


def test_a_figure_keeps_its_digits_in_the_canonical_bytes() -> None:
    widest = "999999999999999999.999999999999999999"  # 18 digits each side: the bound, accepted
    stored = canonical_event(validate_event(event("probe.result", "e1", figure(widest))))
    assert b'"value":"999999999999999999.999999999999999999"' in stored
    assert b'"value":"0.50"' in canonical_event(
        validate_event(event("probe.result", "e1", figure("0.50")))
    )


def test_a_figure_names_nothing_undeclared() -> None:
    data = dict(PROBE, figures=[{"name": "sum", "value": "1", "unit": "GB/s", "colour": "red"}])
    assert error_of("probe.result", data) == (
        "data.figures[0].colour",
        "Extra inputs are not permitted",
    )


def test_a_probe_has_at_least_one_figure_and_a_known_kind() -> None:
    assert error_of("probe.result", dict(PROBE, figures=[]))[0] == "data.figures"
    assert error_of("probe.result", dict(PROBE, probe="iperf"))[0] == "data.probe"


def test_a_matrix_has_its_declared_shape() -> None:
    matrix = {
        "title": "x",
        "unit": "GB/s",
        "rows": ["0", "1"],
        "columns": ["0", "1"],
        "cells": [[None, "1"]],
    }
    assert error_of("probe.result", dict(PROBE, matrix=matrix)) == (
        "data.matrix",
        "cells are not 2 rows of 2 columns",
    )
    matrix["cells"] = [[None, "1"], ["2", None]]
    stored = canonical_event(
        validate_event(event("probe.result", "e1", dict(PROBE, matrix=matrix)))
    )
    assert b'"cells":[[null,"1"],["2",null]]' in stored


@pytest.mark.parametrize("link", ["NV18", "NV3", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"])
def test_every_link_of_the_legend_is_accepted(link: str) -> None:
    data = dict(
        PLACEMENT,
        topology=dict(PLACEMENT["topology"], links=[{"a": "GPU0", "b": "GPU1", "link": link}]),
    )
    assert validate_event(event("placement.observed", "e1", data)).type == "placement.observed"


@pytest.mark.parametrize("link", ["NV0", "NS", "nv18", "PXBNODE", ""])
def test_a_link_outside_the_legend_is_refused(link: str) -> None:
    data = dict(
        PLACEMENT,
        topology=dict(PLACEMENT["topology"], links=[{"a": "GPU0", "b": "GPU1", "link": link}]),
    )
    assert error_of("placement.observed", data)[0] == "data.topology.links[0].link"


def test_a_topology_has_a_gpu() -> None:
    data = dict(PLACEMENT, topology={"gpus": [], "nics": [], "links": []})
    assert error_of("placement.observed", data)[0] == "data.topology.gpus"
