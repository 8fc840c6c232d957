"""The one text form of a time, and UTC: what the event models (schemas/types.py) and every
output that writes a time share, kept apart from the models so that writing a time does
not build them."""

from __future__ import annotations

from datetime import datetime, timezone


def as_utc(moment: datetime) -> datetime:
    """The same instant in UTC; a naive time (allowed only where the caller said so) is UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    if moment.tzinfo is timezone.utc:
        return moment
    return moment.astimezone(timezone.utc)


def format_utc(moment: datetime) -> str:
    """The one text form of a time: `YYYY-MM-DDTHH:MM:SSZ`, or `...SS.ffffffZ` when the
    microseconds are not zero (byte for byte what orjson writes with OPT_UTC_Z)."""
    moment = as_utc(moment)
    text = moment.replace(tzinfo=None).isoformat(
        timespec="microseconds" if moment.microsecond else "seconds"
    )
    return text + "Z"
