"""The one way a page (finance's page, the envelope, the dispute letter, the diagnostic
packet) is rendered: Jinja with autoescape, and data that cannot be spoofed
(docs/reports.md, "Output nobody can spoof").

- Every `{{ value }}` is escaped (`<script>` is text) and, through `finalize`, shows its
  control, bidi and format characters as visible escapes (`\\u202e`): none reaches the
  page raw, in text, a `<title>`, SVG or an attribute alike.
- `{{ value|bdi }}` is for a value set among other words: it is isolated in `<bdi>`, so
  that no right-to-left text in an id can reorder the words and figures around it, and its
  escapes are marked `<span class="ctl">`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from schemas.display import is_unsafe, terminal_safe, visible_escape

if TYPE_CHECKING:
    import jinja2


def shown(value: Any) -> Any:
    """Jinja's `finalize`: a str with its unsafe characters escaped visibly; markup that our
    own code built (a macro, `bdi`, RULES.md's text) and numbers as they are."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return terminal_safe(value)
    return value


def bdi(value: Any) -> Markup:
    """A data value isolated for bidi, each unsafe character shown as a marked escape."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return Markup(f"<bdi>{escape(text)}</bdi>")
    inner = "".join(_marked(c) if is_unsafe(c) else str(escape(c)) for c in text)
    return Markup(f"<bdi>{inner}</bdi>")


def _marked(char: str) -> str:
    return f'<span class="ctl">{visible_escape(char)}</span>'


#: The one stylesheet of every page (page.css), inlined in each page's <style>.
PAGE_CSS = Path(__file__).with_name("page.css")


def page_css() -> Markup:
    """page.css's text, for a template's `<style>{{ page_css }}</style>` (our own file, so
    it is markup; it holds no `</style>`)."""
    text = PAGE_CSS.read_text()
    if "</" in text:
        raise ValueError(f"{PAGE_CSS}: a stylesheet may not hold '</'")
    return Markup(text)


def environment(templates: Path, **options: Any) -> jinja2.Environment:
    """The pages' Jinja environment over the folder `templates` (`options`: whitespace control).
    Jinja is imported here, by the commands that render a page, not by every one that
    imports the reports (`reconcile --format json`)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=shown,
        **options,
    )
    env.filters["bdi"] = bdi
    env.globals["page_css"] = page_css()
    return env


#: How many characters of a label a chart's label column holds (12 px text in about 210
#: user units: the finance page's bars, the letter's timeline).
LABEL_CHARS = 30


def keyed_labels(
    labels: list[str], room: int = LABEL_CHARS
) -> tuple[list[str], list[tuple[str, str]]]:
    """Each label as a chart draws it, and the chart's key: a label longer than `room`
    characters is drawn as a numbered key and its first characters (`[1] acme / INV-20…`)
    and is written out whole in the key under the chart, so that no label is only in a
    hover title (the page and paper show the key; the SVG `<title>` still holds it)."""
    shown: list[str] = []
    keys: list[tuple[str, str]] = []
    for label in labels:
        if len(label) <= room:
            shown.append(label)
            continue
        key = f"[{len(keys) + 1}]"
        shown.append(f"{key} {label[: room - len(key) - 2]}…")
        keys.append((key, label))
    return shown, keys
