"""gpuledger's command line: each command parses options, calls one library function,
and turns the library's errors into one-line messages (exit 2 for bad input or usage,
1 when the thing checked is wrong). No traceback reaches a user for bad input."""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import click

# The project's modules (sqlalchemy, pydantic, duckdb, pyarrow, jinja2 behind them) are
# imported inside the commands that use them, so that --help starts fast.
from fixtures.sim.config import DEFAULT_START, Rates, SimConfig
from ledger.arrow_probe import skip_pandas_probe_on_import

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    import ledger
    import reconcile.reports as reconcile_reports
    from fixtures.sim import Manifest
    from ledger.driver import ReadableStore, SQLiteReader
    from reconcile.engine.result import Reconciliation
    from reconcile.reports.finance_page import Answers
    from schemas import Record
    from schemas.errors import GpuledgerError

# What --help shows, written out so that --help imports no library; tests/test_cli.py
# keeps each equal to the library's own (ingest.format_names(), ledger.append, ...).
INGEST_FORMATS = (
    "cloudevents",
    "sacct",
    "focus",
    "dcgm-stats",
    "dcgm-metrics",
    "kueue",
    "k8s-events",
    "serving-bench",
    "nvidia-smi-topo",
    "nvbandwidth",
    "nccl-tests",
    "kueue-clusterqueue",
    "sacctmgr-qos",
    "prometheus-range",
    "dcgmi-diag",
)
DEFAULT_BATCH_SIZE = 5000
DEFAULT_ORIGIN = "gpuledger.local/ledger"
RECONCILE_FORMATS = ("table", "json", "csv", "parquet", "html")
REPORT_FORMATS = ("table", "json", "csv", "tsv")
#: Piped or redirected, a table is as wide as its cells need (rich would cut it to 80 columns).
PIPED_WIDTH = 10_000

F = TypeVar("F", bound=Callable[..., Any])


def _console(**options: Any) -> Console:
    """A console that never parses markup or emoji codes from what it prints: data is shown
    as written (its control and bidi characters escaped by schemas.display). Made when a
    command first prints through one (rich's import is most of a JSON report's start)."""
    from rich.console import Console

    return Console(markup=False, emoji=False, **options)


@functools.cache
def _stderr() -> Console:
    return _console(stderr=True)


@functools.cache
def _stdout() -> Console:
    return _console(width=None if sys.stdout.isatty() else PIPED_WIDTH)


class FiniteFloatRange(click.FloatRange):
    """A float range that refuses NaN too (which compares false with either bound, so a
    plain FloatRange lets it through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class InputError(click.ClickException):
    """Bad input or usage: exit 2, one line (shown escaped: it may quote any data)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(terminal_safe(message))


def terminal_safe(text: str) -> str:
    """schemas.display's, imported on first use (schemas loads pydantic; --help must not)."""
    from schemas.display import terminal_safe as safe

    return safe(text)


def _echo(message: str, err: bool = False) -> None:
    """One line that may hold data (ids, tenants, file names, a packet's contents): its
    control, bidi and format characters are shown escaped, so it stays one honest line."""
    click.echo(terminal_safe(message), err=err)


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        skip_pandas_probe_on_import()  # 0.15 s a command that never uses pandas
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # click's own three lines (usage, hint, error) as one
            path = exc.ctx.command_path if exc.ctx else ctx.command_path
            raise InputError(f"{exc.format_message()} See `{path} --help`.") from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own (--help among them): checked first, so they import nothing
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:
            if exc.filename is None:
                raise
            raise InputError(f"{exc.filename}: {exc.strerror}") from None
        except Exception as exc:
            _map_library_error(exc)
            if os.environ.get("GPULEDGER_DEBUG"):
                raise
            if isinstance(exc, OSError):  # the machine's (a full disk, a lost mount): one line
                _echo(f"error: {_first_line(exc)}", err=True)
            else:
                _echo(f"internal error: {_first_line(exc)}", err=True)
                _echo(
                    "run it again with GPULEDGER_DEBUG=1 for the traceback, and report it",
                    err=True,
                )
            sys.exit(3)


def _map_library_error(exc: Exception) -> None:
    """The one place the library's error tree meets exit codes: bad input exits 2 in one
    line, a failed check prints its verdict and exits 1; anything else is left to raise.
    (Imported here, on failure only: `schemas` loads pydantic, which --help never needs.)"""
    from schemas.errors import BadInput, CheckFailed

    if isinstance(exc, BadInput):
        raise InputError(_with_flag(exc)) from None
    if isinstance(exc, CheckFailed):
        lines = (
            _with_flag(exc).split("\n") if getattr(exc, "multiline", False) else [_with_flag(exc)]
        )
        for number, line in enumerate(lines):
            _echo(f"{exc.verdict}: {line}" if number == 0 else line, err=True)
        sys.exit(1)


def _first_line(exc: BaseException) -> str:
    """An unexpected error as one line: its type and the store's one line of it (a
    database error's SQL and links stay out), cut to 300 characters."""
    from ledger.store import first_line

    name, text = type(exc).__name__, first_line(exc)[:300]
    return name if text == name else f"{name}: {text}"


def _with_flag(exc: GpuledgerError) -> str:
    """The library names the parameter an error is about; the command line names its flag."""
    return f"--{exc.option.replace('_', '-')}: {exc}" if exc.option else str(exc)


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        "db_url",
        default=None,
        metavar="URL",
        help="Database URL (default: $GPULEDGER_DB, else sqlite:///gpuledger.db).",
    )(fn)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuledger")
def main() -> None:
    """gpuledger: the evidence ledger and reconciliation engine for rented GPU compute."""


@main.command()
@db_option
def init(db_url: str | None) -> None:
    """Create the store: tables and append-only triggers (safe to repeat)."""
    store = _writable_store(db_url)
    store.init()
    click.echo(f"initialised {store.safe_url}")


#: The flags that gave format options before --set, kept as hidden aliases of
#: `--set NAME=VALUE` (written out so that --help imports no library; tests/test_cli.py
#: keeps them equal to the options the formats' objects declare).
FORMAT_OPTION_ALIASES = (
    "fields",
    "delimiter",
    "cluster",
    "tenant_field",
    "tenant",
    "allocation",
    "job",
    "timezone",
    "gpu_field",
    "allocation_field",
    "node",
    "fabric_domain",
    "scrape_time",
    "flavor_class",
    "qos_tenant",
    "window_start",
    "interval_s",
    "metric",
)


def _format_option_aliases(fn: F) -> F:
    """`--cluster X` and the like: hidden, each the same as `--set cluster=X`."""
    for name in reversed(FORMAT_OPTION_ALIASES):
        fn = click.option(f"--{name.replace('_', '-')}", name, default=None, hidden=True)(fn)
    return fn


@main.command("ingest")
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(INGEST_FORMATS),
    default=None,
    help="Source format (default: detected, else cloudevents).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Records a transaction; a batch is appended whole or not at all.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A format option (cluster=eu-west, tenant=acme, ...): the options each format "
    "takes, and which it requires, are listed by --list-formats. Repeatable.",
)
@click.option(
    "--list-formats",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _param, value: _list_formats(ctx) if value else None,
    help="List the formats and each one's options, and exit.",
)
@click.option(
    "--manifest",
    type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
    default=None,
    help="Ingest every file this manifest lists, with its format and options, in order "
    "(options given here are defaults under each file's own).",
)
@click.option(
    "--owner",
    default=None,
    metavar="provider|tenant:NAME",
    help="Whose source the files are (default: provider). A tenant's source writes "
    "only that tenant's own events (docs/evidence.md); the rest is quarantined.",
)
@click.option(
    "--allow-path",
    "allowed",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A folder outside the manifest's own that its paths may lead to. Repeatable.",
)
@click.argument(
    "files",
    nargs=-1,
    required=False,
    type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
)
@_format_option_aliases
def ingest_command(
    db_url: str | None,
    fmt: str | None,
    batch_size: int,
    manifest: Path | None,
    files: Sequence[Path],
    allowed: tuple[Path, ...],
    settings: tuple[str, ...],
    owner: str | None,
    **aliases: str | None,
) -> None:
    """Append the events of FILES (or of every file --manifest lists); prints read / appended /
    duplicate / quarantined.

    Format options are given with --set KEY=VALUE (a manifest entry gives its own); they
    are defaults for every file whose format takes them.

    Exits 1 when any record was quarantined (the good records are still appended).
    """
    import ledger

    given = _format_options(settings, aliases)
    if owner is not None:
        given["owner"] = owner
    by_alias = frozenset(name for name, value in aliases.items() if value is not None)
    jobs = _ingest_jobs(manifest, files, fmt, given, allowed, by_alias)
    store = _writable_store(db_url)
    store.init()
    appender = ledger.Appender(store)
    total = ledger.AppendReport()
    for path, file_format, file_options in jobs:
        report = _ingest_one(appender, path, file_format, batch_size, file_options)
        for problem in report.problems:
            _echo(problem, err=True)
        if report.quarantined > len(report.problems):
            click.echo(
                f"… and {report.quarantined - len(report.problems)} more: see `gpuledger "
                "quarantine`",
                err=True,
            )
        _echo(f"{path}: {_counts(report)}{_zone_note(path, file_format, file_options)}")
        for name in ("read", "appended", "duplicates", "quarantined"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
    if len(jobs) > 1:
        click.echo(f"total: {_counts(total)}")
    _seal(store)
    if total.quarantined:
        sys.exit(1)


def _seal(store: ledger.Store) -> None:
    """Seal the complete runs of entries this ingest finished (ledger/sealed.py), so a
    reconciliation reads them as columns with no checkpoint first. The entries are stored
    whatever happens here: a page that cannot be written waits for the next ingest or
    checkpoint, and that is said."""
    from ledger.sealing import seal_in_child

    try:
        seal_in_child(store)
    except ledger.StoreWriteFailed as exc:
        _echo(f"note: the entries are stored; sealing them for fast reads waits: {exc}", err=True)


def _zone_note(path: Path, fmt: str | None, options: Mapping[str, str | None]) -> str:
    """` · times in ZONE` for formats that print local time with no zone (docs/events.md)."""
    from ingest import ingestor_for
    from ingest.base import LocalZone

    if not getattr(ingestor_for(path, fmt), "local_times", False):
        return ""
    return f" · times in {LocalZone(options.get('timezone')).name}"


def _format_options(settings: Sequence[str], aliases: Mapping[str, str | None]) -> dict[str, str]:
    """The format options given, by name: every `--set KEY=VALUE` and every alias flag,
    translated into one mapping here, before anything else sees them."""
    given: dict[str, str] = {}
    pairs = [(key.strip(), sep, value) for key, sep, value in (s.partition("=") for s in settings)]
    for key, sep, value in pairs:
        if not sep or not key:
            raise InputError(f"--set: expected KEY=VALUE, found {key + sep + value!r}")
    given_by_alias = {k: v for k, v in aliases.items() if v is not None}
    for key, _, value in pairs:
        name = key.replace("-", "_")
        if name not in FORMAT_OPTION_ALIASES:
            known = ", ".join(sorted(FORMAT_OPTION_ALIASES))
            raise InputError(
                f"--set: no format takes an option {key!r} (known: {known}; see --list-formats)"
            )
        if given.get(name, value) != value or given_by_alias.get(name, value) != value:
            raise InputError(f"--set: {key} is given twice, with different values")
        given[name] = value
    return {**given_by_alias, **given}


def _list_formats(ctx: click.Context) -> None:
    """Each format, what it reads, and its options (from its options object)."""
    from ingest import INGESTORS

    for ingestor in INGESTORS:
        click.echo(f"{ingestor.name}: {ingestor.description}")
        for name, required, description in ingestor.options.listing():
            click.echo(f"  {name}{' (required)' if required else ''}: {description}")
    ctx.exit(0)


def _ingest_jobs(
    manifest: Path | None,
    files: Sequence[Path],
    fmt: str | None,
    options: dict[str, str],
    allowed: Sequence[Path] = (),
    by_alias: frozenset[str] = frozenset(),
) -> list[tuple[Path, str | None, dict[str, str]]]:
    """(file, format, options) to ingest, in order: FILES with the command's options, or
    the manifest's, each file's ingestor configured first. An error about a format option
    names it `--set NAME`, or by its old flag when that is how it was given."""
    from ingest.base import IngestError
    from ingest.manifest import ingest_plan

    try:
        plan = ingest_plan(manifest, files, fmt, options, allowed)
    except IngestError as exc:
        if exc.option in FORMAT_OPTION_ALIASES and exc.option not in by_alias:
            raise InputError(f"--set {exc.option}: {exc}") from None
        raise
    return [(e.path, e.format, e.options) for e in plan]


def _counts(report: ledger.AppendReport) -> str:
    return (
        f"read {report.read} · appended {report.appended} · "
        f"duplicate {report.duplicates} · quarantined {report.quarantined}"
    )


def _ingest_one(
    appender: ledger.Appender,
    path: Path,
    fmt: str | None,
    batch_size: int,
    options: Mapping[str, str | None] | None = None,
) -> ledger.AppendReport:
    import ledger
    from ingest.worker import extract_parallel
    from ledger import read

    given = {k: v for k, v in (options or {}).items() if v is not None}
    records = extract_parallel(
        path,
        fmt,
        recorded=_recorded_event(appender.store),
        job_tenant=read.job_tenant(appender.store),
        **given,
    )
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_stderr(),
        disable=not _stderr().is_terminal,
        transient=True,
    )
    with progress:
        task = progress.add_task(terminal_safe(path.name), total=path.stat().st_size)

        def advance(batch: Sequence[Record], _report: ledger.AppendReport) -> None:
            progress.update(task, completed=batch[-1].origin.offset)

        return ledger.append_stream(appender, records, batch_size, advance)


def _recorded_event(store: ledger.Store) -> Callable[..., bytes | None]:
    """The stored event of a (source, id) of a tenant (None: a fleet event), for ingestors
    that see a state again on every poll (dcgm-metrics: the XID gauge; probes: a run) and
    must give one already recorded unchanged. Another tenant's event is never the answer."""
    from ledger import read

    def recorded(source: str, event_id: str, tenant: str | None = None) -> bytes | None:
        found = read.recorded_event(store, source, event_id, tenant)
        return None if found is None else found.encode()

    return recorded


@main.command()
@db_option
@click.option(
    "--pubkey",
    "pubkeys",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help=(
        "Verifier key (keygen's PATH.pub): also check checkpoint signatures, and that one is "
        "signed by it. Repeatable."
    ),
)
@click.option(
    "--checkpoint",
    "saved",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help=(
        "A signed checkpoint saved earlier (needs --pubkey): prove the store still extends it. "
        "Repeatable."
    ),
)
def verify(db_url: str | None, pubkeys: tuple[Path, ...], saved: tuple[Path, ...]) -> None:
    """Recompute every leaf, the chain, the tenant chains, the tree and the checkpoints.

    Exits 1 and names the first broken seq when the ledger was tampered with, rolled
    back below a saved checkpoint, or forked from it.
    """
    import ledger
    from ledger.note import read_verifier
    from ledger.verify import SavedCheckpoint

    store = ledger.Store(db_url)
    verifiers = [read_verifier(p) for p in pubkeys]
    if saved and not verifiers:
        raise InputError(
            "--checkpoint: give the log's --pubkey too, so that the saved checkpoint's signature "
            "is checked"
        )
    checkpoints = [SavedCheckpoint(str(p), _read_text(p, "--checkpoint")) for p in saved]
    _require_store(store)
    result = ledger.verify_ledger(store, verifiers, checkpoints)
    if result.problem is not None:
        _echo(f"FAILED at {result.problem}", err=True)
        sys.exit(1)
    click.echo(
        f"ok: {result.entries} entries, {result.tenants} tenants; checked "
        f"{', '.join(result.checked)}"
    )


def _read_text(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{option}: {path}: cannot read it as UTF-8 text: {exc}") from None


@main.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Private key file to create (mode 0600); the public key goes to PATH.pub.",
)
@click.option(
    "--name",
    default="gpuledger",
    show_default=True,
    help="Key name, as it appears in signed notes.",
)
@click.option(
    "--show",
    "show",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Print the C2SP verifier key of this private key file, and write nothing.",
)
def keygen(out: Path | None, name: str, show: Path | None) -> None:
    """Create an Ed25519 signing key for checkpoints (never stored in the ledger)."""
    from ledger.note import read_any_signer, write_keypair

    if show is not None:
        click.echo(read_any_signer(show).verifier.text())
        return
    if out is None:
        raise InputError(
            "--out: give the private key file to create (or --show PATH to print a key's verifier)"
        )
    signer = write_keypair(out, name)
    click.echo(f"wrote {out} (private, mode 0600) and {out}.pub: {signer.verifier.text()}")


@main.command()
@db_option
@click.option(
    "--key",
    "key_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Private key file written by keygen: sign the head.",
)
@click.option("--origin", default=DEFAULT_ORIGIN, show_default=True, help="The log's origin line.")
@click.option(
    "--witness-request-from",
    "old_size",
    type=click.IntRange(0),
    default=None,
    metavar="OLD_SIZE",
    help=(
        "Also write, to --out, a witness request (tlog-witness add-checkpoint body) from this "
        "size."
    ),
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File for the witness request.",
)
@click.option(
    "--cosignatures",
    "answer",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help=(
        "A witness's answer (cosignature lines): keep those of each --witness with the checkpoint "
        "they sign."
    ),
)
@click.option(
    "--witness",
    "witness_keys",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="A witness's verifier key (witness init writes it); repeatable.",
)
def checkpoint(
    db_url: str | None,
    key_path: Path | None,
    origin: str,
    old_size: int | None,
    out: Path | None,
    answer: Path | None,
    witness_keys: tuple[Path, ...],
) -> None:
    """Sign the ledger's head as a C2SP checkpoint, store it, and print it; or gather
    witnesses' cosignatures into the stored checkpoints."""
    import ledger
    from ledger.checkpoint import sign_checkpoint
    from ledger.note import COSIGNATURE_V1, read_signer, read_verifier
    from ledger.witness import add_cosignatures, staged, write_witness_request

    store = ledger.Store(db_url)
    if answer is not None:
        if not witness_keys:
            raise InputError(
                "--cosignatures: name the witnesses whose cosignatures to keep with --witness VKEY"
            )
        witnesses = [read_verifier(p, COSIGNATURE_V1) for p in witness_keys]
        _require_store(store)
        for number, name in add_cosignatures(
            store, _read_text(answer, "--cosignatures"), witnesses
        ):
            _echo(f"checkpoint #{number}: cosigned by {name}")
        return
    if key_path is None:
        raise InputError(
            "--key: give the private key file to sign with (or --cosignatures FILE --witness VKEY)"
        )
    if (old_size is None) != (out is None):
        raise InputError("--witness-request-from and --out go together")
    signer = read_signer(key_path)
    _require_store(store)
    # Nothing is printed or left in --out unless the checkpoint is committed: the request
    # is written, staged, inside the checkpoint's transaction, and renamed after it.
    request = (
        None
        if old_size is None or out is None
        else (lambda conn, signed: write_witness_request(conn, signed, old_size, out))
    )
    try:
        signed = sign_checkpoint(store, signer, origin, before_commit=request)
    except BaseException:
        if out is not None:
            staged(out).unlink(missing_ok=True)
        raise
    if out is not None:
        staged(out).replace(out)
    click.echo(signed.note, nl=False)
    if out is not None:
        click.echo(
            f"wrote {out}: a witness request from size {old_size} to {signed.body.size}", err=True
        )


@main.group("witness", cls=Group)
def witness_group() -> None:
    """A witness (c2sp.org/tlog-witness, offline): cosign a log's checkpoint only if it
    extends the last one cosigned."""


def state_option(fn: F) -> F:
    return click.option(
        "--state",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="The witness's state folder: its key, and the last checkpoint cosigned per log.",
    )(fn)


@witness_group.command("init")
@state_option
@click.option(
    "--name",
    default=None,
    help="The witness's key name (first init only), e.g. witness.example/w1.",
)
@click.option("--origin", default=None, help="A log to follow: its origin line.")
@click.option(
    "--log-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="That log's verifier key (keygen's PATH.pub).",
)
def witness_init(state: Path, name: str | None, origin: str | None, log_key: Path | None) -> None:
    """Create the witness (key in STATE, mode 0600) and follow a log; safe to repeat."""
    from ledger.note import read_verifier
    from ledger.witness import KEY_FILE, follow_log, init_witness

    if name is None and not (state / KEY_FILE).exists():
        raise InputError("--name: a new witness needs a key name")
    if (origin is None) != (log_key is None):
        raise InputError("--origin and --log-key go together")
    verifier = init_witness(state, name or "")
    click.echo(f"witness {verifier.text()} (verifier key in {state / KEY_FILE}.pub)")
    if origin is not None and log_key is not None:
        follow_log(state, origin, read_verifier(log_key))
        click.echo(f"following {origin}")


@witness_group.command("cosign")
@state_option
@click.argument("request", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File for the cosignature line (default: standard output).",
)
def witness_cosign(state: Path, request: Path, out: Path | None) -> None:
    """Cosign the checkpoint of REQUEST (`checkpoint --witness-request-from`) if it extends
    the last one cosigned for its log; exit 1, naming both checkpoints, on a fork."""
    from ledger.witness import WitnessRequest, cosign_request

    line = cosign_request(state, WitnessRequest.parse(_read_text(request, "REQUEST")))
    if out is None:
        click.echo(line, nl=False)
    else:
        out.write_text(line, encoding="utf-8")
        click.echo(f"wrote {out}")


@witness_group.command("show")
@state_option
def witness_show(state: Path) -> None:
    """The witness's verifier key, and each log it follows with the last size cosigned."""
    from ledger.witness import WitnessError, show_witness

    try:
        lines = show_witness(state)
    except OSError as exc:
        raise WitnessError(f"--state: {state}: {exc.strerror}") from None
    click.echo("\n".join(terminal_safe(line) for line in lines))


@main.command()
@db_option
@click.option("--type", "type_", default=None, help="Only entries of this event type.")
@click.option("--tenant", default=None, help="Only this tenant's entries.")
@click.option(
    "--format", "fmt", type=click.Choice(["jsonl", "parquet"]), default="jsonl", show_default=True
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Output file (default: standard output, JSON Lines only).",
)
def export(
    db_url: str | None, type_: str | None, tenant: str | None, fmt: str, out: Path | None
) -> None:
    """Write entries, with their salts and hashes, as JSON Lines or Parquet."""
    import ledger

    store = ledger.Store(db_url)
    _require_store(store, tenant)
    if fmt == "parquet" and out is None:
        raise InputError("--out: Parquet needs an output file")
    if out is None:
        count = ledger.export_entries(store, sys.stdout.buffer, fmt, type_, tenant)
    elif fmt == "parquet":
        count = ledger.export_entries(store, out, fmt, type_, tenant)
    else:
        with out.open("wb") as handle:
            count = ledger.export_entries(store, handle, fmt, type_, tenant)
    if out is not None:
        click.echo(f"wrote {count} entries to {out}")


@main.command("quarantine")
@db_option
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def quarantine_command(db_url: str | None, fmt: str) -> None:
    """List the records kept in quarantine, with file, line, field and reason."""
    import ledger

    store = ledger.Store(db_url)
    _require_store(store)
    rows = ledger.quarantined(store)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("the quarantine is empty")
        return
    from schemas.display import DataTable

    table = DataTable(
        "#", "kind", "where", "field", "reason", "record", title=f"quarantine: {len(rows)} records"
    )
    for row in rows:
        record = row["record"] if len(row["record"]) <= 60 else row["record"][:59] + "…"
        table.add_row(
            str(row["qid"]),
            row["kind"],
            f"{row['file']}:{row['line']}",
            row["field"],
            row["reason"],
            record,
        )
    _stdout().print(table)


#: --since and --until of reconcile and of every report (capacity has its own window).
PERIOD_OPTIONS = (
    click.option(
        "--since",
        "period_since",
        default=None,
        metavar="RFC3339",
        help="Period start (inclusive; default: open): lines by their billed interval's "
        "start, jobs by their submission, promises by their promised start.",
    ),
    click.option(
        "--until",
        "period_until",
        default=None,
        metavar="RFC3339",
        help="Period end (exclusive; default: open).",
    ),
)


@main.command("reconcile")
@db_option
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--invoice", default=None, help="Only this invoice's lines.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(RECONCILE_FORMATS),
    default="table",
    show_default=True,
    help=(
        "table (terminal), json (tenants and lines, as docs/finance-views.md shows), csv or "
        "parquet (one row per line and category), html (finance's page, with pictures)."
    ),
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Output file (default: standard output; Parquet needs a file).",
)
@PERIOD_OPTIONS[0]
@PERIOD_OPTIONS[1]
@click.option(
    "--fail-on-disputed",
    "fail_on",
    type=click.STRING,
    default=None,
    metavar="AMOUNT",
    help="Exit 1 when provider-borne plus disputed money exceeds AMOUNT (in any currency).",
)
@click.option(
    "--cluster",
    default=None,
    metavar="local[N]|ray://HOST:PORT",
    help=(
        "Run the partitions (by tenant) on a Ray cluster: N local workers, or a running "
        "cluster (docs/scale.md). The answer is the single process's, byte for byte."
    ),
)
def reconcile_command(
    db_url: str | None,
    tenant: str | None,
    invoice: str | None,
    fmt: str,
    out: Path | None,
    period_since: str | None,
    period_until: str | None,
    fail_on: str | None,
    cluster: str | None,
) -> None:
    """Say what every billed GPU-second was: productive, overhead, restart, reclaimed, idle,
    unallocated.
    """
    import reconcile
    import reconcile.reports.output as reconcile_render

    limit = _decimal_option("--fail-on-disputed", fail_on)
    period = _period(period_since, period_until)
    # the whole ledger of a SQLite file is read through sqlite3 alone (ledger/driver.py)
    plain = cluster is None and tenant is None and invoice is None
    reader = _plain_sqlite(db_url) if plain else None
    full = _readable_store(db_url, tenant, invoice) if reader is None else None
    store: ReadableStore = reader or cast("ledger.Store", full)
    if cluster is None:
        result = reconcile.reconcile_store(store, tenant, invoice, period=period)
        _may_end_at_once()
    elif not period.open:
        raise InputError("--cluster reconciles whole periods: leave out --since and --until")
    else:
        from reconcile.engine.cluster import ClusterError, parse_cluster, reconcile_on_cluster

        assert full is not None  # not `plain`
        try:
            result = reconcile_on_cluster(full, parse_cluster(cluster), tenant, invoice)
        except ClusterError as exc:
            raise InputError(f"--cluster: {exc}") from None
    if fmt == "table":
        for table in reconcile_render.tables(result):
            _stdout().print(table)
        if not result.cell_count:
            click.echo("no billing lines to reconcile")
    else:
        if fmt == "parquet" and out is None:
            raise InputError("--out: Parquet needs an output file")
        stream = cast(IO[str], _TerminalText()) if sys.stdout.isatty() else sys.stdout
        answers = None
        if fmt == "html":  # the provider's answers to the findings, where there are some
            answers = _page_answers(result, lambda: full or _readable_store(db_url))
        reconcile_render.write(
            result,
            fmt,
            out if out is not None else stream,
            store.safe_url if db_url else None,
            None if period.open else period.label(),
            answers,
        )
        if out is not None:
            click.echo(
                f"wrote {'the finance page' if fmt == 'html' else f'{result.cell_count} rows'} to "
                f"{out}",
                err=True,
            )
    if limit is not None and any(amount > limit for amount in result.disputed_amounts().values()):
        click.echo(f"provider-borne and disputed money exceeds {limit}", err=True)
        sys.exit(1)


@main.command("explain")
@click.argument("category", required=False)
def explain_command(category: str | None) -> None:
    """What each category and bearer of a reconciliation means, and the rule (RULES.md) that
    decides it.

    CATEGORY is a category (`productive`, `idle_unexplained`, ...), `unbilled`, or a bearer
    (`provider`, `customer`, `disputed`); without it, all of them."""
    from reconcile.reports.explain import render

    click.echo(render(category), nl=False)


@main.command("dispute")
@db_option
@click.option("--tenant", required=True, help="The tenant the packet is for.")
@click.option("--invoice", required=True, help="The invoice disputed.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Private key file written by keygen: a fresh checkpoint of the head is signed with it.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The packet file to write (JSON).",
)
@click.option(
    "--since-size",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help=(
        "Add a consistency proof from tree size N (the customer's previous checkpoint) to the "
        "packet's."
    ),
)
@click.option(
    "--stored-checkpoint",
    is_flag=True,
    help=(
        "Use the stored checkpoint of the head, with its witnesses' cosignatures, instead of "
        "signing a new one."
    ),
)
def dispute_command(
    db_url: str | None,
    tenant: str,
    invoice: str,
    key_path: Path,
    out: Path,
    since_size: int | None,
    stored_checkpoint: bool,
) -> None:
    """Write a customer's dispute packet for one invoice: findings, the tenant's entries,
    proofs, signed checkpoint.
    """
    import ledger
    from ledger.note import read_signer
    from reconcile.packets.dispute import PacketError, build_dispute, check_writable, write_packet
    from reconcile.packets.letter import write_letter_beside

    store = ledger.Store(db_url)
    signer = read_signer(key_path)
    _require_store(store)
    check_writable(out)  # before build_dispute signs: a dispute that cannot finish signs nothing
    packet = build_dispute(store, tenant, invoice, signer, since_size, stored_checkpoint)
    # the letter is made from the packet's verification: a packet that fails it is not written
    try:
        letter = write_letter_beside(packet, signer.verifier, out)
    except PacketError as exc:
        _echo(
            f"FAILED: the packet built from this store does not verify: {exc}; no packet was "
            "written (`gpuledger verify` checks the store)",
            err=True,
        )
        sys.exit(1)
    write_packet(packet, out)
    fleet = sum(1 for e in packet["bundle"]["entries"] if e["tenant"] is None)
    withheld = len(packet["bundle"].get("withheld", []))
    _echo(
        f"wrote {out}: invoice {invoice} of {tenant}, {len(packet['findings']['lines'])} lines; "
        f"{len(packet['bundle']['entries']) - fleet} entries of {tenant} and {fleet} fleet "
        f"entries; checkpoint of tree size {packet['bundle']['checkpoint'].splitlines()[1]}"
        + (f"; {withheld} fleet entries withheld (they name another tenant)" if withheld else "")
    )
    click.echo(
        f"wrote {letter}: the dispute letter, from verify-packet's recomputation of the packet"
    )


@main.command("answer")
@db_option
@click.option("--tenant", required=True, help="The tenant whose dispute is answered.")
@click.option("--invoice", required=True, help="The invoice disputed.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Private key file written by keygen: each answer is signed with it.",
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def answer_command(
    db_url: str | None, tenant: str, invoice: str, key_path: Path, file: Path
) -> None:
    """Record the provider's signed answers to a dispute's findings (docs/answers.md).

    FILE holds {"answers": [{"line_id", "category", "state", ...}]}: state `accepted`,
    `rejected` (with `reason` and `evidence`, the seqs of the entries cited) or `partly`
    (with `amount`, the part accepted). An answer already recorded is not appended again;
    a different one is the finding's next revision.
    """
    import ledger
    from ledger.note import read_signer
    from reconcile.packets.answers import read_answer_file, record_answers

    store = ledger.Store(db_url)
    signer = read_signer(key_path)
    _require_store(store)
    asked = read_answer_file(file)
    done = record_answers(store, tenant, invoice, signer, asked, origin=str(file))
    counted = ", ".join(f"{state} {n}" for state, n in sorted(done.states.items()))
    _echo(
        f"answered {len(asked)} findings of invoice {invoice} of {tenant} ({counted}): "
        f"{done.appended} appended, {done.unchanged} unchanged, signed by {signer.name}"
    )


@main.command("credit-note")
@db_option
@click.option("--tenant", required=True, help="The tenant credited.")
@click.option("--invoice", required=True, help="The invoice the credit corrects.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The CSV file to write (FinOps FOCUS 1.2 rows).",
)
@click.option(
    "--provider",
    default=None,
    help=(
        "The provider issuing the credit (InvoiceIssuerName, ProviderName); default: the "
        "source line's FOCUS InvoiceIssuerName, else its source's authority."
    ),
)
def credit_note_command(
    db_url: str | None, tenant: str, invoice: str, out: Path, provider: str | None
) -> None:
    """Write the credit note of a dispute's accepted money: FOCUS 1.2 rows (ChargeCategory
    Credit, ChargeClass Correction), one per finding accepted whole or partly
    (docs/answers.md).
    """
    import ledger
    from reconcile.packets.credit_note import build_credit_note, write_credit_note

    store = ledger.Store(db_url)
    _require_store(store)
    note = build_credit_note(store, tenant, invoice, provider)
    write_credit_note(note, out)
    _echo(
        f"wrote {out}: credit note for invoice {invoice} of {tenant}, {len(note.rows)} rows, "
        f"{-note.total} {note.currency}".rstrip()
    )


@main.command("verify-packet")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--pubkey",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The ledger's verifier key (keygen's PATH.pub).",
)
@click.option(
    "--previous",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help=(
        "An older packet or a checkpoint note: the packet's checkpoint must be that tree or "
        "extend it."
    ),
)
@click.option(
    "--witness",
    "witness_keys",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help=(
        "A witness's verifier key: require its valid cosignature on the packet's checkpoint. "
        "Repeatable."
    ),
)
@click.option(
    "--letter",
    "letter_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the dispute letter (HTML) from this verification's recomputation.",
)
@click.option(
    "--tenant",
    "expect_tenant",
    default=None,
    help="Refuse the packet unless it is for this tenant (compared exactly).",
)
@click.option(
    "--invoice",
    "expect_invoice",
    default=None,
    help="Refuse the packet unless it is about this invoice (compared exactly).",
)
def verify_packet_command(
    file: Path,
    pubkey: Path,
    previous: Path | None,
    witness_keys: tuple[Path, ...],
    letter_path: Path | None,
    expect_tenant: str | None,
    expect_invoice: str | None,
) -> None:
    """Check a dispute packet with the public key alone and recompute its findings; exit 1 names
    what failed.
    """
    from ledger.note import COSIGNATURE_V1, read_verifier
    from ledger.witness import require_cosignatures
    from reconcile.packets.dispute import check_pinned, read_packet, read_previous, verify_dispute
    from reconcile.packets.letter import build_letter, summary, write_letter

    verifier = read_verifier(pubkey)
    witnesses = [read_verifier(p, COSIGNATURE_V1) for p in witness_keys]
    earlier = None if previous is None else read_previous(previous)
    packet = read_packet(file)
    checked = verify_dispute(packet, verifier, earlier)
    check_pinned(checked, expect_tenant, expect_invoice)
    require_cosignatures(packet["bundle"]["checkpoint"], witnesses)
    _echo(
        f"ok: invoice {checked.invoice_id} of {checked.tenant}, {checked.lines} lines; "
        f"{checked.tenant_entries} entries of {checked.tenant} complete up to tree size "
        f"{checked.checkpoint.size} and {checked.fleet_entries} fleet entries, signed by "
        f"{verifier.name}; findings recomputed and equal"
        + (
            f"; {len(checked.answers)} answers of the provider, signatures checked"
            if checked.answers
            else ""
        )
        + (
            f"; {checked.withheld} fleet entries withheld (leaf hash only: they name another "
            "tenant)"
            if checked.withheld
            else ""
        )
        + (
            ""
            if checked.previous_size is None
            else f"; extends the previous checkpoint of tree size {checked.previous_size}"
        )
    )
    if witnesses:
        _echo(f"cosigned by {', '.join(w.name for w in witnesses)}")
    letter = build_letter(checked, verifier.name)
    click.echo(summary(letter))
    if letter_path is not None:
        write_letter(letter, letter_path)
        click.echo(f"wrote {letter_path}")


def _decimal_option(name: str, text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text)
    except ArithmeticError:
        raise InputError(f"{name}: not a decimal amount: {text!r}") from None
    if not value.is_finite():  # NaN cannot be compared, and no amount exceeds Infinity
        raise InputError(f"{name}: not a finite decimal amount: {text!r}")
    return value


class ReportGroup(Group):
    """`report`: one command per report of `reconcile.reports.REPORT_LIST`, with its
    formats, options and help, made the first time the group's commands are asked for (so
    `import cli`, and `gpuledger --help`, load no library)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._made = False
        self._commands: dict[str, click.Command] = {}
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> dict[str, click.Command]:
        if not self._made:
            self._made = True
            import reconcile.reports as reports

            for spec in reports.REPORT_LIST:
                self._commands.setdefault(spec.name, _report_command(spec))
        return self._commands

    @commands.setter
    def commands(self, value: Mapping[str, click.Command]) -> None:
        self._commands = dict(value)


@main.group("report", cls=ReportGroup)
def report_group() -> None:
    """Operator and finance reports: promises, capacity, outcomes, placement, envelope
    (definitions: README).
    """


def _report_command(spec: reconcile_reports.Report) -> click.Command:
    """The command of one report: --db, --tenant, --format (the report's formats), --out,
    and the report's own options (before --format where the report says so)."""

    def callback(
        db_url: str | None, tenant: str | None, fmt: str, out: Path | None, **given: Any
    ) -> None:
        period = _period(given.pop("period_since", None), given.pop("period_until", None))
        cluster = given.pop("cluster", None)
        options = {
            o.name: _time_option(o.flag, given[o.name]) if o.time else given[o.name]
            for o in spec.options
        }
        _emit_report(spec.name, db_url, tenant, fmt, out, options, period, cluster)

    own = [_report_option(o) for o in spec.options]
    if not any(o.name == "since" for o in spec.options):  # capacity's window is its period
        own = [*PERIOD_OPTIONS, *own]
    shared = [
        click.option(
            "--format", "fmt", type=click.Choice(spec.formats), default="table", show_default=True
        ),
        click.option(
            "--out",
            type=OutputPath(dir_okay=False, path_type=Path),
            default=None,
            help="Output file (default: standard output).",
        ),
        click.option(
            "--cluster",
            default=None,
            metavar="local[N]|ray://HOST:PORT",
            help="Reconcile on a Ray cluster (as `reconcile --cluster`): the same report.",
        ),
    ]
    options = [
        db_option,
        click.option("--tenant", default=None, help=spec.tenant_help),
        *(own + shared if spec.options_first else shared + own),
    ]
    for option in reversed(options):
        callback = option(callback)
    return click.command(spec.name, help=spec.help)(callback)


def _report_option(option: reconcile_reports.ReportOption) -> Callable[[F], F]:
    settings: dict[str, Any] = {"default": option.default, "help": option.help}
    if option.choices:
        settings |= {"type": click.Choice(option.choices), "show_default": True}
    if option.metavar:
        settings["metavar"] = option.metavar
    return click.option(option.flag, **settings)


def _emit_report(
    name: str,
    db_url: str | None,
    tenant: str | None,
    fmt: str,
    out: Path | None,
    options: dict[str, Any],
    period: Any = None,
    cluster: str | None = None,
) -> None:
    import ledger
    import reconcile.reports as reports
    from reconcile.engine.scope import ALL_TIME

    since, until = options.get("since"), options.get("until")
    if since is not None and until is not None and since >= until:
        raise InputError("--since: not before --until: the time range is empty")
    store = ledger.Store(db_url)
    _require_store(store, tenant)
    if cluster is not None and period is not None and not period.open:
        raise InputError("--cluster reconciles whole periods: leave out --since and --until")
    if cluster is None:
        doc = reports.report(store, name, tenant, period or ALL_TIME, **options)
    else:
        from reconcile.engine.cluster import ClusterError

        try:
            doc = reports.report(store, name, tenant, period or ALL_TIME, cluster, **options)
        except ClusterError as exc:
            raise InputError(f"--cluster: {exc}") from None
    rendered = reports.render(name, doc, fmt)
    if isinstance(rendered, str):
        if out is None:
            click.echo(_for_terminal(rendered) if sys.stdout.isatty() else rendered, nl=False)
        else:
            out.write_text(rendered)
            click.echo(f"wrote {out}", err=True)
        return
    if out is None:
        _print_all(_stdout(), rendered)
        return
    with out.open("w") as handle:
        _print_all(_console(file=handle, width=PIPED_WIDTH), rendered)


def _for_terminal(text: str) -> str:
    """CSV or TSV shown on a terminal: each line escaped (written to a pipe or a file, the
    text is left exact, for the tool or spreadsheet that reads it)."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


class _TerminalText:
    """Standard output for text written in whole lines (CSV parts, JSON, a page) when it is
    a terminal: each line escaped as `_for_terminal` does."""

    def write(self, text: str) -> int:
        return sys.stdout.write(_for_terminal(text))


def _print_all(console: Console, parts: Sequence[Table | Text]) -> None:
    from rich.table import Table

    for part in parts:
        console.print(
            part, soft_wrap=not isinstance(part, Table)
        )  # commands stay whole on one line


def _period(since: str | None, until: str | None) -> Any:
    """The scope.Period of --since and --until (an empty one is an error naming --since)."""
    from reconcile.engine.scope import Period

    start, end = _time_option("--since", since), _time_option("--until", until)
    if start is not None and end is not None and start >= end:
        raise InputError("--since: not before --until: the time range is empty")
    return Period(start, end)


def _time_option(name: str, text: str | None) -> int | None:
    from reconcile.engine.figures import parse_time

    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError:
        raise InputError(f"{name}: not an RFC 3339 time: {text!r}") from None


@main.command("packet")
@db_option
@click.option("--promise", "promise_id", required=True, help="The promise's promise_id.")
@click.option(
    "--tenant", default=None, help="The promising tenant (needed only when two use the same id)."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for packet.json and packet.html (created).",
)
def packet_command(db_url: str | None, promise_id: str, tenant: str | None, out: Path) -> None:
    """The operator's diagnostic packet for a promise: decisions, reservations and
    preemptions, device and fabric health, application trace, checkpoints, billing."""
    import ledger
    import reconcile.packets.diagnostic as diagnostic

    store = ledger.Store(db_url)
    _require_store(store)
    paths = diagnostic.write_packet(store, promise_id, out, tenant)
    click.echo(f"wrote {', '.join(str(p) for p in paths)}")


def rate_options(fn: F) -> F:
    """One `--<anomaly>-rate` option per field of fixtures.sim.Rates."""
    for name in reversed(Rates.names()):
        fn = click.option(
            f"--{name.replace('_', '-')}-rate",
            name,
            type=FiniteFloatRange(0, 1),
            default=None,
            help=Rates.help(name),
        )(fn)
    return fn


def sim_options(fn: F) -> F:
    for option in reversed(
        [
            click.option(
                "--gpus",
                type=click.IntRange(1),
                default=64,
                show_default=True,
                help="GPUs in the fleet (8 a node).",
            ),
            click.option(
                "--days",
                type=click.IntRange(1, 366),
                default=3,
                show_default=True,
                help="Days simulated.",
            ),
            click.option(
                "--tenants",
                type=click.IntRange(1, 99),
                default=4,
                show_default=True,
                help="Tenants: even ones on Kubernetes (Kueue), odd ones on Slurm.",
            ),
            click.option(
                "--seed",
                type=int,
                default=7,
                show_default=True,
                help="The same seed writes the same bytes.",
            ),
            click.option(
                "--scale",
                type=FiniteFloatRange(0.01, 100),
                default=1.0,
                show_default=True,
                help="Event density: progress and billing periods are divided by it.",
            ),
            click.option(
                "--start",
                default=DEFAULT_START,
                show_default=True,
                help="Start of the period (RFC 3339, whole second).",
            ),
        ]
    ):
        fn = option(fn)
    return rate_options(fn)


def _sim_config(
    gpus: int,
    days: int,
    tenants: int,
    seed: int,
    scale: float,
    start: str,
    rates: dict[str, float | None],
    multinode: bool = False,
) -> SimConfig:
    try:
        chosen = Rates(**{k: v for k, v in rates.items() if v is not None})
        return SimConfig(
            seed=seed,
            gpus=gpus,
            days=days,
            tenants=tenants,
            scale=scale,
            start=start,
            rates=chosen,
            multinode=multinode,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None


@main.command("simulate")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help=(
        "Folder for the source files, the ground truth and manifest.json (files in it are "
        "overwritten)."
    ),
)
@click.option("--dry-run", is_flag=True, help="Count what would be written, and write nothing.")
@click.option(
    "--multinode",
    is_flag=True,
    help=(
        "Add a pool of multi-node jobs and gangs, placement captures and credit shares "
        "(reconcile/RULES.md 11-13), with their truth."
    ),
)
@sim_options
def simulate_command(
    out: Path,
    dry_run: bool,
    multinode: bool,
    gpus: int,
    days: int,
    tenants: int,
    seed: int,
    scale: float,
    start: str,
    **rates: float | None,
) -> None:
    """Simulate a fleet in the real source formats, with its ground truth (see manifest.json)."""
    from fixtures.sim import count_events, simulate

    config = _sim_config(gpus, days, tenants, seed, scale, start, rates, multinode)
    if dry_run:
        for name, count in count_events(config).items():
            click.echo(f"{name}: {count}")
        return
    manifest = simulate(config, out)
    for entry in manifest.files:
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in entry["options"].items())
        click.echo(f"{out / entry['path']}  ({entry['format']}{' ' + options if options else ''})")
    click.echo(f"truth: {', '.join(str(out / name) for name in manifest.truth.values())}")
    click.echo(
        f"manifest: {out / 'manifest.json'} · "
        + " · ".join(
            f"{k} {v}"
            for k, v in manifest.counts.items()
            if k in ("allocations", "progress_events", "billing_lines")
        )
    )


@main.command()
@db_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-out"),
    show_default=True,
    help="Folder for the demo's fleet, store, key and outputs.",
)
@click.option(
    "--seed", type=int, default=7, show_default=True, help="Seed of the simulated fleet."
)
def demo(db_url: str | None, out: Path, seed: int) -> None:
    """Simulate a small fleet, ingest it, sign, verify, reconcile, and write every report and
    packet.
    """
    import ledger
    from ledger.checkpoint import sign_checkpoint
    from ledger.note import read_signer, read_verifier
    from reconcile.demo import (
        biggest_findings,
        category_table,
        change_lines,
        envelope_table,
        placement_claim_line,
        placement_lines,
        receipts_line,
        run_demo_outputs,
        serving_table,
        totals_line,
    )

    config = SimConfig(seed=seed, multinode=True, causes=True)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _demo_simulate(config, out / "sim")
    _say(
        f"gpuledger demo: {config.gpus} GPUs, {config.tenants} tenants, {config.days} days "
        f"(seed {seed}); the ground truth is in {out / 'sim' / manifest.truth['lines']}"
    )
    _say(
        f"1 simulate: {manifest.counts['allocations']} allocations, "
        f"{manifest.counts['progress_events']} "
        f"progress events, {manifest.counts['billing_lines']} billing lines in "
        f"{len(manifest.files)} files"
    )
    store = _demo_store(out, db_url)
    report = _demo_ingest(store, out / "sim", manifest)
    _say(f"2 ingest: {_counts(report)}")
    key = _demo_key(out)
    signed = sign_checkpoint(store, read_signer(key))
    (out / "checkpoint.txt").write_text(signed.note)
    _say(
        f"3 checkpoint: tree size {signed.body.size}, signed with a fresh key: "
        f"{out / 'checkpoint.txt'}"
    )
    result = ledger.verify_ledger(store, [read_verifier(Path(f"{key}.pub"))])
    _say(
        f"4 verify: {'ok' if result.ok else 'FAILED ' + str(result.problem)}: "
        f"{result.entries} entries, {result.tenants} tenants; checked {', '.join(result.checked)}"
    )
    done = run_demo_outputs(store, out, read_signer(key), read_verifier(Path(f"{key}.pub")))
    _say(f"5 reconcile: {done.result.cell_count} line categories; {totals_line(done.result)}")
    _stdout().print(category_table(done.result))
    _stdout().print(biggest_findings(done.result))
    _say(f"6 promises: {_missed_count(done.missed_promises)}")
    for miss in done.missed_promises[:5]:  # as many as _missed_count says
        command = str(miss.get("packet_command", "")).replace(
            "gpuledger packet", f"gpuledger packet --db {store.safe_url}", 1
        )
        _say(f"  {miss['tenant']} {miss['promise_id']}: {_miss_text(miss)}  → {command}")
    # the demo's steps are several lines of the simulator's own text; each is escaped apart
    for n, line in enumerate(done.dispute.split("\n")):
        _say(f"7 {line}" if n == 0 else line)
    for line in done.packet.split("\n") if done.packet else []:
        _say(f"  {line}")
    reports = out / "reports"
    _say(
        f"8 envelope: {len(done.reports['envelope']['groups'])} groups of source and class in "
        f"{reports / 'envelope.csv'}, side by side in {reports / 'envelope.html'}"
    )
    _stdout().print(envelope_table(done.reports["envelope_by_class"]))
    _say(f"9 capacity: {receipts_line(done.reports['capacity'])}")
    for line in change_lines(done.reports["capacity"]):
        _say(f"  {line}")
    first, rho = placement_lines(done.reports["placement"])
    _say(f"10 placement: {first}")
    _say(f"  {placement_claim_line(done.result)}")
    _say(f"  {rho}")
    _say(f"11 serving: {reports / 'serving.csv'}")
    _stdout().print(serving_table(done.reports["outcomes"]))
    _say(
        f"  reports and reconciliation: {out / 'reports'}, {out / 'reconcile.json'} (.csv, "
        f".parquet), finance page {out / 'reconcile.html'}"
    )
    _say(
        f"outputs: store {store.safe_url} · sources and truth {out / 'sim'} · verifier key "
        f"{key}.pub"
    )
    _demo_serve_hint(store, out, next(iter(done.result.tenants()), None))
    if not result.ok or report.quarantined:
        sys.exit(1)


def _demo_serve_hint(store: ledger.Store, out: Path, tenant: str | None) -> None:
    """How to open the web application on the demo's store, with fresh tokens (kept in
    OUT/tokens.txt, mode 0600: a demo's, never for a real store)."""
    from ledger.tokens import Role, create

    made = [("operator", create(store, Role("operator"), label="demo")[1])]
    if tenant is not None:
        made.append((f"tenant:{tenant}", create(store, Role("tenant", tenant), label="demo")[1]))
    tokens = out / "tokens.txt"
    tokens.touch(mode=0o600)
    tokens.write_text("".join(f"{role} {text}\n" for role, text in made))
    _say(
        f"12 the web app: gpuledger serve --db {store.safe_url} --key {out / 'demo-key'}  "
        "then open http://127.0.0.1:8080/login"
    )
    for role, text in made:
        _say(f"  {role} token: {text}")


def _missed_count(misses: Sequence[dict[str, Any]], shown: int = 5) -> str:
    """How many were missed, and which the demo lists (the first `shown`)."""
    if not misses:
        return "none missed"
    which = "it" if len(misses) == 1 else f"the first {min(shown, len(misses))}"
    return f"{len(misses)} missed; {which}, with the command that writes the packet:"


def _miss_text(miss: dict[str, Any]) -> str:
    parts = []
    if miss.get("start_status") in ("late", "not_started"):
        parts.append(
            f"start by {miss['start_by']}, started {miss.get('started') or 'never'}"
            + (f" ({miss['start_delay_s']} s late)" if miss.get("start_delay_s") else "")
        )
    if miss.get("completion_status") in ("late", "not_completed"):
        parts.append(
            f"complete by {miss['complete_by']}, completed {miss.get('completed') or 'never'}"
        )
    return "; ".join(parts) or "missed"


def _say(text: str) -> None:
    _stdout().print(terminal_safe(text), soft_wrap=True)  # paths stay whole on one line


def _demo_simulate(config: SimConfig, folder: Path) -> Manifest:
    from fixtures.sim import simulate

    if (folder / "manifest.json").exists():  # a previous demo's fleet: ours to replace
        shutil.rmtree(folder)
    return simulate(config, folder)


def _demo_store(out: Path, db_url: str | None) -> ledger.Store:
    if db_url is None:
        for leftover in out.glob("gpuledger.db*"):
            leftover.unlink()
        db_url = f"sqlite:///{out / 'gpuledger.db'}"
    store = _writable_store(db_url)
    store.init()
    return store


def _demo_ingest(store: ledger.Store, folder: Path, manifest: Manifest) -> ledger.AppendReport:
    """Every file of the manifest, in its order, each with its progress bar."""
    import ledger

    appender = ledger.Appender(store)
    total = ledger.AppendReport()
    for entry in manifest.files:
        report = _ingest_one(
            appender,
            folder / entry["path"],
            entry["format"],
            ledger.append.DEFAULT_BATCH_SIZE,
            entry["options"],
        )
        for name in ("read", "appended", "duplicates", "quarantined"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
        total.problems.extend(report.problems)
    for problem in total.problems[:10]:
        _echo(problem, err=True)
    return total


def _demo_key(out: Path) -> Path:
    from ledger.note import write_keypair

    key = out / "demo-key"
    for old in (key, Path(f"{key}.pub")):
        old.unlink(missing_ok=True)  # a fresh key every run
    write_keypair(key, "gpuledger-demo")
    return key


@main.command("serve")
@db_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (put TLS in a reverse proxy in front: docs/serve.md).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on.",
)
@click.option(
    "--key",
    "key_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The provider's signing key (keygen): customers then download signed dispute "
    "packets and letters.",
)
def serve_command(db_url: str | None, host: str, port: int, key_path: Path | None) -> None:
    """The web application and API: pages for finance, customers and operators, /api/v1, and
    /metrics.

    Every request needs a token (`gpuledger token create`), sent as `Authorization: Bearer TOKEN`
    or signed in on /login."""
    import uvicorn

    import ledger
    from reconcile.serve import create_app

    store = ledger.Store(db_url)
    _require_store(store)
    store.init()  # stores made before tokens existed gain their table
    click.echo(f"serving {store.safe_url} on http://{host}:{port}/ (Ctrl-C stops)", err=True)
    uvicorn.run(
        create_app(store, key_path),
        host=host,
        port=port,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
    )


@main.group("token", cls=Group)
def token_group() -> None:
    """API tokens for `gpuledger serve`: create, list, revoke (stored hashed)."""


@token_group.command("create")
@db_option
@click.option(
    "--role",
    required=True,
    metavar="operator|tenant:NAME|collector:SOURCE",
    help=(
        "What the token may do: everything, one tenant's documents, or post events under a source."
    ),
)
@click.option(
    "--owner",
    default=None,
    metavar="provider|tenant:NAME",
    help="A collector's rights over what it posts (default: provider).",
)
@click.option("--label", default="", help="A note for `token list` (who holds it).")
def token_create(db_url: str | None, role: str, owner: str | None, label: str) -> None:
    """Create a token; the token itself is printed once, on the last line."""
    from ledger.tokens import Role, create
    from schemas.owners import Owner

    store = _writable_store(db_url)
    _require_store(store)
    store.init()
    info, text = create(store, Role.parse(role), Owner.parse(owner), label)
    _echo(
        f"created token {info.token_id} for {info.role} (owner {info.owner}); it is shown once:",
        err=True,
    )
    click.echo(text)


@token_group.command("list")
@db_option
def token_list(db_url: str | None) -> None:
    """Every token: id, role, owner, label, when created and revoked (never the token)."""
    from ledger.tokens import listed

    store = ledger_store_for_read(db_url)
    table = _data_table("id", "role", "owner", "label", "created", "revoked", title="tokens")
    for t in listed(store):
        table.add_row(
            t.token_id, str(t.role), str(t.owner), t.label, t.created_at, t.revoked_at or "–"
        )
    _stdout().print(table)


@token_group.command("revoke")
@db_option
@click.argument("token_id")
def token_revoke(db_url: str | None, token_id: str) -> None:
    """Revoke the token TOKEN_ID (as `token list` shows it); safe to repeat."""
    from ledger.tokens import revoke

    store = ledger_store_for_read(db_url)
    info = revoke(store, token_id)
    _echo(f"revoked token {info.token_id} ({info.role}) at {info.revoked_at}")


def ledger_store_for_read(db_url: str | None) -> ledger.Store:
    """The store, which must hold a ledger, with the tokens' table made if it is older."""
    import ledger

    store = ledger.Store(db_url)
    _require_store(store)
    store.init()
    return store


def _data_table(*columns: str, title: str) -> Any:
    from schemas.display import DataTable

    return DataTable(*columns, title=title)


def _require_store(
    store: ledger.Store, tenant: str | None = None, invoice: str | None = None
) -> None:
    """The one way a command that reads opens the store: it must hold a ledger (a missing
    SQLite file is never created), and the tenant and invoice asked for must be in it."""
    from reconcile.engine.scope import check_scope

    if store.in_memory or store.file_missing() or not store.is_initialised():
        raise InputError(f"--db: no ledger at {store.safe_url} (run `gpuledger init` first)")
    check_scope(store, tenant, invoice)


def _readable_store(
    db_url: str | None, tenant: str | None = None, invoice: str | None = None
) -> ledger.Store:
    """`_require_store`'s store, opened."""
    import ledger

    store = ledger.Store(db_url)
    _require_store(store, tenant, invoice)
    return store


def _page_answers(result: Reconciliation, store: Callable[[], ledger.Store]) -> Answers:
    """The provider's answers to the findings the finance page shows: none where the
    reconciled entries hold none (the store is then neither opened nor read for them)."""
    from reconcile.reports.finance_page import ANSWER_TYPE, OWED_BY

    if result.event_types is not None and ANSWER_TYPE not in result.event_types:
        return {}
    # imported here: the answers' rules read the event models, which only this needs
    from reconcile.packets.answers import stored_cell_answers

    return stored_cell_answers(store(), result.cells_borne_by(OWED_BY))


def _plain_sqlite(db_url: str | None) -> SQLiteReader | None:
    """The store as a SQLite file read without SQLAlchemy, where it is one that opens as a
    ledger; else None (`ledger.Store` then opens it, and names what is wrong)."""
    from ledger.driver import default_url, sqlite_reader

    return sqlite_reader(db_url or default_url())


def _writable_store(db_url: str | None) -> ledger.Store:
    """The store a command writes to: never one in memory, which the process takes with it."""
    import ledger

    store = ledger.Store(db_url)
    if store.in_memory:
        raise InputError(
            f"--db: {store.safe_url} is in memory: what is written is lost when the command ends "
            "(give a file, sqlite:///PATH)"
        )
    return store


class OutputPath(click.Path):
    """An `--out` checked before the command runs, so nothing is signed or written when it
    cannot be: a file's folder must exist; a folder (created) must not be a file."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(value)
        if not self.file_okay:
            if path.exists() and not path.is_dir():
                raise InputError(f"--out: {path} is a file, not a folder")
        elif not path.parent.is_dir():
            raise InputError(f"--out: no folder {path.parent} (create it first)")
        elif path.is_dir():
            raise InputError(f"--out: {path} is a folder; name a file in it")
        return super().convert(value, param, ctx)


def _check_outputs(group: click.Group) -> None:
    """Every command's `--out` becomes an OutputPath: one check for all (and any added later;
    a report's command, made when first asked for, is made with one)."""
    for command in group.commands.values():
        if isinstance(command, ReportGroup):
            continue
        if isinstance(command, click.Group):
            _check_outputs(command)
        for param in command.params:
            if (
                param.name in ("out", "letter_path")
                and isinstance(param.type, click.Path)
                and not isinstance(param.type, OutputPath)
            ):
                old = param.type
                param.type = OutputPath(
                    file_okay=old.file_okay, dir_okay=old.dir_okay, path_type=Path
                )


_check_outputs(main)

#: Set by a command that, once its output is written, leaves the interpreter's teardown
#: nothing to do but free memory (no Ray cluster, no server, no file left open): the
#: `gpuledger` program then ends at once (`run`) instead of freeing hundreds of MB of
#: DuckDB and Arrow memory object by object (about 0.1 s of a reconciliation).
_end_at_once = False


def _may_end_at_once() -> None:
    global _end_at_once
    _end_at_once = True


def run() -> None:
    """The `gpuledger` program: `main`, then, where the command allows it, its exit
    status with nothing torn down (standard output and error flushed first)."""
    try:
        main()
    except SystemExit as exc:
        if not _end_at_once or not (exc.code is None or isinstance(exc.code, int)):
            raise
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            raise exc from None  # a closed pipe: the ordinary exit says so
        os._exit(exc.code or 0)


if __name__ == "__main__":
    run()
