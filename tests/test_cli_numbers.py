"""Numeric options refuse NaN and the infinities (issue 28): `--fail-on-disputed NaN` used
to raise (a NaN cannot be compared) and `-Infinity` passed every reconciliation as over
the limit; a NaN passed every float range (it compares false with both bounds).

Every numeric option of the CLI is found by walking its commands, so an option added
later is tested too: each refuses each non-finite spelling with one usage line, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli import main
from tests.conftest import run_cli, write_jsonl
from tests.reconcile_helpers import Scenario

NOT_FINITE = ("NaN", "nan", "-nan", "sNaN", "Infinity", "-Infinity", "inf", "-inf", "+Inf")


def commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def float_options() -> list[tuple[tuple[str, ...], str]]:
    """(command path, option) of every option typed as a float."""
    found = []
    for path, command in commands(main):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                param.type, click.types.FloatParamType
            ):
                found.append((path, param.opts[0]))
    return found


FLOAT_OPTIONS = float_options()


def test_the_float_options_are_the_simulator_s() -> None:
    # by hand: --scale and one --<anomaly>-rate per field of fixtures.sim.Rates (19), on
    # `simulate`; a new float option elsewhere is tested below all the same
    assert {path for path, _ in FLOAT_OPTIONS} == {("simulate",)}
    assert len(FLOAT_OPTIONS) == 20


@pytest.mark.parametrize(
    ("path", "option"), FLOAT_OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o in FLOAT_OPTIONS]
)
def test_every_float_option_refuses_what_is_not_finite(
    path: tuple[str, ...], option: str, tmp_path: Path
) -> None:
    for value in NOT_FINITE:
        # parsed before the command runs: the first bad option ends it (no fleet is simulated)
        result = CliRunner().invoke(
            main, [*path, "--out", str(tmp_path / "out"), f"{option}={value}"]
        )
        assert result.exit_code == 2, (value, result.output, result.exception)
        message = result.stderr.strip()
        assert "\n" not in message and "Traceback" not in message, message
        assert message.startswith(f"Error: Invalid value for '{option}': "), message
        assert not (tmp_path / "out").exists()


def test_float_options_still_take_finite_numbers(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            "--out",
            str(tmp_path),
            "--dry-run",
            "--scale",
            "0.5",
            "--stall-rate",
            "1e-1",
            "--days",
            "1",
            "--gpus",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def provider_money(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with 7.20 of provider-borne money (A1 never granted: all unallocated), so
    that the limit is compared with an amount."""
    folder = tmp_path_factory.mktemp("numbers")
    s = Scenario()
    s.line("L1", "A1", "10:00", "11:00", gpus=2, amount="7.20")
    url = f"sqlite:///{folder / 'ledger.db'}"
    assert (
        run_cli("ingest", "--db", url, str(write_jsonl(folder / "events.jsonl", s.events)))[0] == 0
    )
    return url


@pytest.mark.parametrize("value", NOT_FINITE)
def test_fail_on_disputed_refuses_what_is_not_finite(provider_money: str, value: str) -> None:
    code, out, err = run_cli(
        "reconcile", "--db", provider_money, "--format", "json", "--fail-on-disputed", value
    )
    assert (code, out) == (2, "")
    assert err == f"Error: --fail-on-disputed: not a finite decimal amount: {value!r}\n"


@pytest.mark.parametrize(("value", "code"), [("7.19", 1), ("7.20", 0), ("1E+3", 0), ("-1", 1)])
def test_fail_on_disputed_compares_finite_amounts(
    provider_money: str, value: str, code: int
) -> None:
    # 7.20 provider-borne: over 7.19 and -1, not over 7.20 or 1000
    assert (
        run_cli(
            "reconcile", "--db", provider_money, "--format", "json", "--fail-on-disputed", value
        )[0]
        == code
    )
