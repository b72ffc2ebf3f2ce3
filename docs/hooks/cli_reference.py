"""MkDocs hook: the command-line reference, generated from ``fdptm.cli.build_parser()``.

The page ``reference/cli.md`` holds a hand-written introduction and the marker
``<!-- cli-reference -->``, which this hook replaces at build time with one section per
subcommand (and per sub-subcommand of ``fdptm local``): its usage, its description and a
table of its arguments with their help, default and whether they are required.

The options of ``fdptm release``, ``fdptm backfill`` and ``fdptm local release`` are built by
``fdptm.request.add_arguments`` from the fields of the request models (``ReleaseRequest``,
``LocalReleaseRequest``): argparse gives them no default of its own (an option not given is
None and the model fills in its default), so for those options the default and whether the
field is required come from the model itself. Nothing here is written by hand.
"""

from __future__ import annotations

import argparse
import re
from functools import partial

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
WIDTH = 72


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lacks its marker {MARKER}")
    return markdown.replace(MARKER, render())


def render() -> str:
    """The whole generated reference, as Markdown."""
    from fdptm.cli import build_parser
    from fdptm.request import LocalReleaseRequest, ReleaseRequest

    models = {
        ("release",): ReleaseRequest,
        ("backfill",): ReleaseRequest,
        ("local", "release"): LocalReleaseRequest,
    }
    parser = build_parser()
    out = [_section(parser, ("fdptm",), None, None)]
    for path, sub, summary in _walk(parser, ()):
        out.append(_section(sub, ("fdptm", *path), summary, models.get(path)))
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name)


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    """Every subcommand below ``parser``, depth first, in the parser's order."""
    for name, sub, summary in _subcommands(parser):
        yield (*path, name), sub, summary
        yield from _walk(sub, (*path, name))


def _section(parser, path, summary, model) -> str:
    name = " ".join(path)
    level = "#" * min(len(path) + 1, 4)
    parser.formatter_class = partial(argparse.HelpFormatter, width=WIDTH)
    lines = [f"{level} `{name}`", ""]
    if summary:
        lines += [_sentence(summary), ""]
    usage = parser.format_usage().strip()
    lines += ["```text", usage, "```", ""]
    if parser.description:
        lines += [_escape_text(parser.description), ""]
    children = list(_subcommands(parser))
    if children:
        lines += ["| subcommand | what it does |", "| --- | --- |"]
        lines += [
            f"| [`{name} {child}`](#{_anchor(f'{name} {child}')}) | {_cell(text or '')} |"
            for child, _, text in children
        ]
        lines.append("")
    rows = [_row(action, model) for action in parser._actions if _documented(action)]
    if rows:
        lines += ["| argument | help | default | required |", "| --- | --- | --- | --- |"]
        lines += rows
        lines.append("")
    groups = [g for g in parser._mutually_exclusive_groups if len(g._group_actions) > 1]
    for group in groups:
        flags = ", ".join(f"`{a.option_strings[0]}`" for a in group._group_actions)
        lines += [f"At most one of {flags}.", ""]
    return "\n".join(lines)


def _documented(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)


def _row(action: argparse.Action, model) -> str:
    field = _field(action, model)
    invocation = _invocation(action)
    help_text = action.help or ""
    if field is not None:
        # add_arguments appends the model's default to the help text; it has its own column
        help_text = re.sub(r" \(default [^()]*\)$", "", help_text)
    if action.choices and not isinstance(action.choices, dict):
        choices = ", ".join(f"`{c}`" for c in action.choices)
        help_text = f"{help_text}; one of {choices}" if help_text else f"one of {choices}"
    return (
        f"| {invocation} | {_cell(help_text)} | {_default(action, field)} "
        f"| {_required(action, field)} |"
    )


def _field(action: argparse.Action, model):
    """The request model's field behind ``action``, if the option was built from one."""
    if model is None:
        return None
    name = "m2_options" if action.dest == "m2_option" else action.dest
    return model.model_fields.get(name)


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    if action.choices:
        return f"`{flags} CHOICE`"
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"`{flags} {metavar}`"


def _default(action: argparse.Action, field) -> str:
    if field is not None:
        if field.is_required():
            return ""
        value = field.get_default(call_default_factory=True)
    else:
        value = action.default
    if value in (None, False, {}, []) or value is argparse.SUPPRESS:
        return ""
    return f"`{value}`"


def _required(action: argparse.Action, field) -> str:
    if action.required:
        return "yes"
    if field is not None and field.is_required():
        return "yes (request model)"
    return ""


def _anchor(title: str) -> str:
    """The id Python-Markdown's toc extension gives a heading ``title`` (in backticks)."""
    slug = re.sub(r"[^\w\s-]", "", title.lower()).strip()
    return re.sub(r"[-\s]+", "-", slug)


def _sentence(text: str) -> str:
    text = _escape_text(text.strip())
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _escape_text(text: str) -> str:
    """Help text as Markdown: argparse's ``%%`` unescaped, Markdown's specials escaped
    (outside the help's own `code spans`, which Markdown shows as they are)."""
    parts = text.replace("%%", "%").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([*_<>\[\]])", r"\\\1", parts[i])
    return "`".join(parts)


def _cell(text: str) -> str:
    return _escape_text(" ".join(text.split())).replace("|", "\\|")
