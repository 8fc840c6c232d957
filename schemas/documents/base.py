"""What every document shares: a frozen pydantic model that refuses members it does not
define, read with `from_json` and written with `to_json`, byte for byte as the command
that writes it always has (`JSON_STYLE`: indentation, separators, escaping).

A document read from outside (a packet a verifier cannot trust) is checked for each
member's type where the model declares it; the first problem becomes `InvalidDocument`,
named by its place (`packet.bundle.entries[3].seq: expected an integer, got a string`).
Scalars carry their own checks (`Str`, `Int`, ...) so that the message names the JSON type
found, and a member the format does not define is refused, never ignored.

Members that a document may leave out are unset when absent and stay absent when
written (`exclude_unset`), so a document read and written again is the same text.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from schemas.errors import CheckFailed
from schemas.fast_json import dumps

#: The ledger's integers stay below this (canonical JSON keeps them exact in a double).
MAX_INT = 2**53


class InvalidDocument(CheckFailed, ValueError):
    """A document that is not of its format; the message (one line) names the first member
    that is wrong, by its place in the document."""

    def __init__(self, message: str) -> None:
        # one line, and printable whatever the document's strings hold (lone surrogates too)
        one_line = " ".join(message.splitlines())
        super().__init__(one_line.encode("utf-8", "backslashreplace").decode("utf-8"))


def show(value: Any) -> str:
    """A JSON value as the messages quote it: as JSON, cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def json_type(value: Any) -> str:
    """What JSON calls the type of `value`, with its article ("a string")."""
    for kind, name in (
        (bool, "a boolean"),
        (dict, "an object"),
        (list, "an array"),
        (str, "a string"),
        (int, "an integer"),
        (float, "a number"),
        (type(None), "null"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


_KIND_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def kind(*kinds: type, ranged: bool = False) -> BeforeValidator:
    """A check that a value is one of `kinds` (a boolean is no integer), run before the
    model's own; with `ranged`, an integer must lie in [0, 2^53)."""
    expected = " or ".join(_KIND_NAMES[k] for k in kinds)

    def check(value: Any) -> Any:
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise ValueError(f"expected {expected}, got {json_type(value)}")
        if (
            ranged
            and isinstance(value, int)
            and not isinstance(value, bool)
            and not 0 <= value < MAX_INT
        ):
            raise ValueError(f"{value} is out of range [0, 2^53)")
        return value

    return BeforeValidator(check)


def hex_digits(value: str) -> str:
    """A check that a string is hex digits."""
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"not hex: {show(value)}") from None
    return value


Str = Annotated[str, kind(str)]
OptStr = Annotated[str | None, kind(str, type(None))]
Int = Annotated[int, kind(int)]
OptInt = Annotated[int | None, kind(int, type(None))]
Bool = Annotated[bool, kind(bool)]
#: A number that is whole when the figures are (GPU-seconds, shares): an int stays an int.
Number = Annotated[int | float, kind(int, float)]
OptNumber = Annotated[int | float | None, kind(int, float, type(None))]
#: A member whose type varies with the data it quotes (a column of an event's data).
Scalar = Annotated[str | int | float | bool | None, kind(str, int, float, bool, type(None))]


class Document(BaseModel):
    """A frozen document: exactly its members, each of its type, no coercion."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: how the document is named at the start of a problem's place ("packet.bundle…")
    ROOT: ClassVar[str] = "document"
    #: json.dumps's arguments that give the bytes the document's command writes
    JSON_STYLE: ClassVar[dict[str, Any]] = {"indent": 2}

    @classmethod
    def parse(cls, value: Any) -> Self:
        """The document in a JSON value (json.loads's); InvalidDocument names the first
        member that is wrong."""
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise InvalidDocument(problem(exc, cls.ROOT)) from None

    @classmethod
    def from_json(cls, text: bytes | str) -> Self:
        """The document in JSON text; InvalidDocument when it is not JSON or not the format."""
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidDocument(f"{cls.ROOT}: not JSON: {exc}") from None
        except RecursionError:
            raise InvalidDocument(f"{cls.ROOT}: JSON nested too deeply") from None
        return cls.parse(value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON value: members in the order the model declares, absent ones left out."""
        return self.model_dump(exclude_unset=True, by_alias=True)

    def to_json(self) -> str:
        """The text its command writes, ending in a newline (by orjson, the same bytes as
        json.dumps in JSON_STYLE: schemas/fast_json.py)."""
        return dumps(self.to_dict(), **self.JSON_STYLE) + "\n"


def place(root: str, loc: tuple[int | str, ...]) -> str:
    """`packet.bundle.entries[3].seq` from pydantic's location of a problem."""
    out = root
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{show(part)[1:-1]}"
    return out


_EXPECTED = {
    "int_type": "an integer",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "bool_type": "a boolean",
    "float_type": "a number",
    "none_required": "null",
}


def problem(exc: ValidationError, root: str) -> str:
    """The first problem pydantic found, as `place: what is wrong`."""
    error = exc.errors(include_url=False)[0]
    kind_ = error["type"]
    if kind_ == "missing":
        what = "missing"
    elif kind_ == "extra_forbidden":
        what = "not a member of this format"
    elif kind_ in ("value_error", "assertion_error"):
        what = str((error.get("ctx") or {}).get("error", error["msg"]))
    elif kind_ in _EXPECTED:
        what = f"expected {_EXPECTED[kind_]}, got {json_type(error.get('input'))}"
    else:
        message = error["msg"]
        what = message[:1].lower() + message[1:]
    return f"{place(root, tuple(error['loc']))}: {what}"


class Period(Document):
    """The period a document covers (RULES.md, "Periods"): [since, until) as RFC 3339 UTC
    times, None where it is open. Documents written before periods leave it out."""

    since: OptStr
    until: OptStr


#: A document's `period` member: absent in documents written before it.
OptPeriod = Annotated[Period | None, kind(dict, type(None))]
