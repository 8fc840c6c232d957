"""Defaults the rules read at run time, apart from the event models (no pydantic here), so
that the engine reads them without building every event type."""

from __future__ import annotations

#: The terms a tenant has until its first policy.terms says otherwise (RULES.md): the
#: warm-up allowed after a start, and the silence that makes a job stalled, in seconds.
DEFAULT_WARMUP_S = 600
DEFAULT_STALL_S = 300
