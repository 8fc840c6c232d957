"""The one tree of errors that gpuledger raises on purpose.

Every error class of the library derives from `GpuledgerError`, through one of two branches:

- `BadInput`: what was given was wrong (a file, a record, an option, a missing store).
  The command line exits 2.
- `CheckFailed`: what was checked is wrong (a tampered ledger, a packet that does not
  verify, a fork, a leak between tenants). The command line exits 1.

A message is for the person who gave the input, and names the file, line and field it is
about. It never names a command-line flag: an error about one of the caller's parameters
carries that parameter's name in `option` (e.g. ``"since_size"``), and the command line
turns it into its flag (``--since-size: …``). A library caller reads `option` instead.
"""

from __future__ import annotations


class GpuledgerError(Exception):
    """The root of every error the library raises on purpose."""

    def __init__(self, message: str = "", *, option: str | None = None) -> None:
        super().__init__(message)
        #: the caller's parameter this error is about, by its Python name, if any
        self.option = option


class BadInput(GpuledgerError):
    """The input was wrong: a file, a record, a parameter or the store named."""


class CheckFailed(GpuledgerError):
    """The thing checked is wrong: a ledger, a packet, a proof, a signature."""

    #: the word the command line prints before the message
    verdict = "FAILED"
