"""MkDocs hook: links from a page to files of the repository outside ``docs/``.

A page links to a benchmark's results as ``../benchmarks/results.md`` (from ``docs/``), so
the link works where the Markdown is read as it is (GitHub, an editor). MkDocs only knows the
files under ``docs/``, and would report such a link as broken. This hook

* finds every such link in the pages (``on_files``) and adds the file it names to the site,
  at its path in the repository (``benchmarks/results.md`` becomes the page
  ``/benchmarks/results/``; a PNG or YAML file is copied as it is), and
* rewrites the link to point at that copy (``on_page_markdown``), so MkDocs checks it like
  any other link (``mkdocs build --strict`` fails on a link to a file that does not exist).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

# a Markdown link or image target: ](target) or ](target "title"), with an optional #anchor
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?((?:\s+\"[^\"]*\")?\))")
# only files of these kinds are brought into the site
KINDS = {".md", ".png", ".yaml", ".yml", ".json"}


def _repo_target(docs: Path, page_uri: str, target: str) -> str | None:
    """The repository path a link ``target`` of page ``page_uri`` names, when it leaves
    ``docs/`` for a file of the repository; else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None  # a URL or an absolute path
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri), target))
    if not inside.startswith("../"):
        return None
    repo = docs.parent.resolve()
    path = (docs / inside).resolve()
    if not path.is_relative_to(repo) or path.suffix not in KINDS:
        return None
    return path.relative_to(repo).as_posix()


def on_files(files, config):
    docs = Path(config["docs_dir"])
    repo = docs.parent.resolve()
    wanted: list[str] = []
    for page in list(files.documentation_pages()):
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            uri = _repo_target(docs, page.src_uri, match.group(2))
            if uri is not None:
                wanted.append(uri)
    added: set[str] = set()
    while wanted:
        uri = wanted.pop()
        path = repo / uri
        if uri in added or not path.is_file():
            continue  # a missing file is left alone: MkDocs reports the broken link
        if files.get_file_from_path(uri) is not None:
            raise ValueError(f"docs/{uri} hides the repository's {uri}")
        files.append(File.generated(config, uri, abs_src_path=str(path)))
        added.add(uri)
        if path.suffix == ".md":
            # a repository page brought in may link to its neighbours (a results page to
            # its plots): bring those too
            for match in LINK.finditer(path.read_text(encoding="utf-8")):
                target = match.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                    continue
                near = posixpath.normpath(posixpath.join(posixpath.dirname(uri), target))
                if not near.startswith("../") and Path(near).suffix in KINDS:
                    wanted.append(near)
    return files


def on_page_markdown(markdown, page, config, files):
    docs = Path(config["docs_dir"])

    def relink(match: re.Match) -> str:
        uri = _repo_target(docs, page.file.src_uri, match.group(2))
        if uri is None or files.get_file_from_path(uri) is None:
            return match.group(0)
        target = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri) or ".")
        return f"{match.group(1)}{target}{match.group(3) or ''}{match.group(4)}"

    return LINK.sub(relink, markdown)
