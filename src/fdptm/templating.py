"""HTML pages from the Jinja2 templates in ``fdptm/templates`` (package data).

One environment for every page (the audit report, the release report): autoescaping on for
every template, so any string from a release or a report (words included) is HTML-escaped,
and undefined names are errors rather than empty strings. The pages share ``base.html.j2``
(layout and style) and ``macros.html.j2`` (the stages and top-words tables).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


@cache
def environment() -> Environment:
    return Environment(
        loader=PackageLoader("fdptm", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    """``template`` (a file name in fdptm/templates) rendered with ``context``."""
    return environment().get_template(template).render(**context)
