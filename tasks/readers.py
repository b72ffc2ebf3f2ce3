"""Readers for the input formats ingest accepts, into one layout of raw per-document fields.

Formats: Parquet, CSV (with a header), JSONL (one object per line), plain text with one
document per line (``.txt``, or any file with ``fmt="lines"``, read as one column ``text``),
and JSON that is either ``{"text": [...], "author_id": [...], ...}`` with parallel lists (the
PHEME files) or a list of objects.

A document has four fields, ``FIELDS``: its text, ``doc_id``, ``author_id`` and ``ts``. A
``ColumnMap`` says which input column holds each; a field that is not mapped is read from
the column of its own name when the file has one. A mapped column the file lacks is an
error, and every input column no field reads is reported back (``Rows.ignored``) so that
ingest can name it: nothing is dropped silently.

Rows keep whatever they hold; typing and validation happen in ``tasks.ingest`` so that a bad
row is reported, not silently coerced. What cannot become rows at all (an empty file, a CSV
row with the wrong number of fields, a lone UTF-16 surrogate, JSON nested beyond what the
parser reads) is a ``BadInputError`` that says what to do. No message quotes row content:
only row and line numbers, byte offsets and column names.

``Rows.sha256`` is the sha256 of the bytes the rows come from: text formats are read once
into memory, hashed and parsed from those bytes; a Parquet file is hashed through the open
file it is then parsed from, so a file replaced (renamed over) meanwhile is still read whole
from the old one (only a rewrite in place between the two reads would go unnoticed).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from fdptm.errors import BadInputError

FIELDS = ("doc_id", "text", "author_id", "ts")
AUTHOR_NAMES = ("author", "user", "user_id", "sender")
"""Column names (any case) read as the author column when none is mapped (issue 27). A
column ``from`` (often a date or an address field) is not read by its name alone: a new
dataset with one is refused until ``--author-column from`` or ``--unit document``
(``tasks.ingest._declare_unit``), so no dataset is labelled author-level on a guess."""
OPTIONS = {
    "text": "--text-column",
    "doc_id": "--id-column",
    "author_id": "--author-column",
    "ts": "--time-column",
}
FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".txt": "lines",
}
_SURROGATE = re.compile("[\ud800-\udfff]")
_CSV_SHAPE = re.compile(r"Expected (\d+) columns, got (\d+)")
_NAMES_SHOWN = 20


ABSENT = object()
"""A key an object of a JSON/JSONL file lacks (``_records``)."""


def quote(name: str) -> str:
    """A column name for a message: quoted, escaped (no control characters) and at most
    80 characters long."""
    text = repr(name)
    return text if len(text) <= 80 else text[:76] + "...'"


def names(columns: list[str]) -> str:
    """Column names for a message, at most ``_NAMES_SHOWN`` of them."""
    if not columns:
        return "no columns"
    shown = ", ".join(quote(c) for c in columns[:_NAMES_SHOWN])
    more = len(columns) - _NAMES_SHOWN
    return f"[{shown}{f', and {more} more' if more > 0 else ''}]"


@dataclass(frozen=True)
class ColumnMap:
    """The input column of each field; None reads the column named like the field, if any."""

    text: str | None = None
    doc_id: str | None = None
    author_id: str | None = None
    ts: str | None = None
    infer_author: bool = False
    """Read a column named like an author (``AUTHOR_NAMES``) as the author column when no
    column ``author_id`` is there and none is mapped (for a dataset that may be author
    level: a file with authors never makes a document-level dataset by omission)."""

    def resolve(self, found: list[str], source: Path) -> dict[str, str]:
        """Field -> input column, for every field the file provides.

        A mapped column must be in ``found``; the text is required; one column serves one
        field only (an explicit mapping takes a column before a field's own name does).
        """
        chosen: dict[str, str] = {}
        for name in FIELDS:
            column = getattr(self, name)
            if column is None:
                continue
            if column not in found:
                raise BadInputError(
                    f"{source.name}: column {quote(column)} (mapped with "
                    f"{OPTIONS[name]}) is not in the file; the file's columns are "
                    f"{names(found)}"
                )
            chosen[name] = column
        for field in FIELDS:
            if field not in chosen and field in found and field not in chosen.values():
                chosen[field] = field
        if self.infer_author and "author_id" not in chosen:
            named = [c for c in found if c.lower() in AUTHOR_NAMES and c not in chosen.values()]
            if len(named) > 1:
                raise BadInputError(
                    f"{source.name} has {len(named)} columns that may name authors "
                    f"({names(named)}); say which one identifies each document's author with "
                    "--author-column NAME, or pass --unit document to make every document "
                    "its own privacy unit"
                )
            if named:
                chosen["author_id"] = named[0]
        if "text" not in chosen:
            raise BadInputError(
                f"{source.name} has no column 'text' (expected the documents' text there); the "
                f"file's columns are {names(found)}. Name the column that holds the text with "
                "--text-column NAME (text_column= in Python)"
            )
        shared = [c for c, k in Counter(chosen.values()).items() if k > 1]
        if shared:
            mapped = sorted(f for f, c in chosen.items() if c == shared[0])
            raise BadInputError(
                f"column {quote(shared[0])} is mapped to more than one field ({', '.join(mapped)});"
                " map each field to a column of its own"
            )
        return chosen


@dataclass
class Rows:
    """Raw values of the mapped fields, what the file holds besides, and the sha256 of the
    bytes they were parsed from."""

    columns: dict[str, list[Any]]
    mapping: dict[str, str]
    ignored: list[str]
    not_columns: list[str]
    sha256: str


def detect_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise BadInputError(
            f"cannot tell the format of {path} from its extension; use one of "
            f"{', '.join(sorted(FORMATS))}"
        )
    return fmt


def read_rows(path: Path, fmt: str | None = None, columns: ColumnMap | None = None) -> Rows:
    """The fields of every row of ``path``, read through ``columns`` (default: own names).

    ``fmt`` overrides the format the extension implies (one of ``FORMATS``' values).
    """
    if not path.exists():
        raise BadInputError(f"input file {path} does not exist")
    if not path.is_file():
        raise BadInputError(f"input {path} is not a file")
    if fmt is not None and fmt not in set(FORMATS.values()):
        raise BadInputError(f"unknown format {fmt!r}; use one of {sorted(set(FORMATS.values()))}")
    fmt = fmt or detect_format(path)
    if path.stat().st_size == 0:
        raise _empty(path, "0 bytes")
    columns = columns or ColumnMap()
    if fmt == "parquet":
        return _read_parquet(path, columns)
    data = path.read_bytes()
    if not data:
        raise _empty(path, "0 bytes")
    if fmt == "csv":
        found, n, read = _read_csv(path, data)
        not_columns: list[str] = []
    else:
        text = _read_utf8(path, data)
        if not text.strip():
            raise _empty(path, "only whitespace")
        if fmt == "lines":
            lines = text.splitlines()
            found, n, read, not_columns = ["text"], len(lines), lambda _: lines, []
        elif fmt == "jsonl":
            found, n, read, not_columns = _records(_from_jsonl(text, path))
        else:
            found, n, read, not_columns = _from_json(text, path)
    _check_unique(found, path)
    if n == 0:
        raise BadInputError(f"{path} holds no rows: an empty corpus cannot be ingested")
    mapping = columns.resolve(found, path)
    ignored = [c for c in found if c not in mapping.values()]
    fields = {f: read(c) for f, c in mapping.items()}
    if fmt in ("json", "jsonl"):
        _no_absent(fields, mapping, path)
    rows = Rows(
        fields,
        mapping,
        ignored,
        not_columns,
        hashlib.sha256(data).hexdigest(),
    )
    if fmt in ("json", "jsonl"):
        _check_surrogates(rows, path)
    return rows


def _empty(path: Path, what: str) -> BadInputError:
    return BadInputError(
        f"{path} is empty ({what}): there is nothing to ingest. Check that the export that "
        "wrote it finished, or point at the file that holds the documents"
    )


def _check_unique(found: list[str], path: Path) -> None:
    twice = [c for c, k in Counter(found).items() if k > 1]
    if twice:
        raise BadInputError(
            f"{path.name} has the column {quote(twice[0])} twice: which one holds the field is "
            "ambiguous. Rename one of them in the file"
        )


def _check_surrogates(rows: Rows, path: Path) -> None:
    """Refuse lone UTF-16 surrogates (JSON ``\\ud800`` escapes without their pair): they are
    not Unicode text and would fail when the batch is written."""
    for field, values in rows.columns.items():
        for i, value in enumerate(values):
            if isinstance(value, str) and _SURROGATE.search(value):
                raise BadInputError(
                    f"{path} row {i + 1}: the value of column {quote(rows.mapping[field])} holds "
                    "a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), which "
                    "is not valid Unicode. Fix or remove that escape (a correct JSON encoder "
                    "writes a character outside the BMP as a pair of escapes) and ingest again"
                )


def _read_utf8(path: Path, data: bytes | None = None) -> str:
    data = path.read_bytes() if data is None else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInputError(
            f"{path} is not valid UTF-8 (invalid byte at offset {exc.start}, line {line}); "
            "re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from exc


def _read_parquet(path: Path, columns: ColumnMap) -> Rows:
    """The rows of a Parquet file, parsed from the same open file that was hashed."""
    with path.open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
        fh.seek(0)
        return _parse_parquet(path, fh, columns, digest)


def _parse_parquet(path: Path, fh, columns: ColumnMap, digest: str) -> Rows:
    try:
        parquet = pq.ParquetFile(fh)
        found = parquet.schema_arrow.names
    except (pa.ArrowException, OSError) as exc:
        raise BadInputError(f"{path} is not a readable Parquet file: {exc}") from exc
    _check_unique(found, path)
    if parquet.metadata.num_rows == 0:
        raise BadInputError(f"{path} holds no rows: an empty corpus cannot be ingested")
    mapping = columns.resolve(found, path)
    try:
        table = parquet.read(columns=list(mapping.values()))
    except (pa.ArrowException, OSError) as exc:
        raise BadInputError(f"{path} is not a readable Parquet file: {exc}") from exc
    out = {}
    for field, column in mapping.items():
        try:
            out[field] = table.column(column).to_pylist()
        except UnicodeDecodeError as exc:
            raise BadInputError(
                f"{path}: column {quote(column)} holds strings that are not valid UTF-8; "
                "write the file again with UTF-8 text"
            ) from exc
    return Rows(out, mapping, [c for c in found if c not in mapping.values()], [], digest)


def _read_csv(path: Path, data: bytes):
    """(column names, number of rows, column name -> values) of the CSV ``data`` read from
    ``path``; every cell a string.

    Parsed serially so that a malformed row's number is known (pyarrow numbers records,
    the header being record 1).
    """
    text = _read_utf8(path, data)
    bad: list[tuple[int | None, int, int]] = []

    def invalid_row(row) -> str:
        bad.append((row.number, row.expected_columns, row.actual_columns))
        return "error"

    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=invalid_row)
    serial = pacsv.ReadOptions(use_threads=False)
    try:
        reader = pacsv.open_csv(pa.BufferReader(data), read_options=serial, parse_options=parse)
        found = reader.schema.names
        reader.close()
        table = pacsv.read_csv(
            pa.BufferReader(data),
            read_options=serial,
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in found},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
            parse_options=parse,
        )
    except pa.ArrowException as exc:
        raise _csv_error(path, exc, bad) from exc
    if data.count(b'"') % 2:
        _check_quotes_closed(text, path)
    return found, table.num_rows, lambda name: table.column(name).to_pylist()


def _check_quotes_closed(text: str, path: Path) -> None:
    """Refuse a quoted field left open at the end of the file, which pyarrow accepts by
    swallowing every later row into it. Only run when the file has an odd number of quotes;
    Python's csv module in strict mode says where (its field size limit raised for the
    check, since one field may hold a whole document)."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))
    done = 0
    try:
        for _ in csv.reader(io.StringIO(text, newline=""), strict=True):
            done += 1
    except csv.Error as exc:
        if "unexpected end of data" not in str(exc):
            return
        where = f"data row {done} (not counting the header)" if done else "the header"
        raise BadInputError(
            f"{path}: CSV parse error: a quoted field that starts in {where} is never closed, "
            "so every later row would become part of it. Close the quote (a quote inside a "
            "quoted field is written twice) and ingest again"
        ) from exc
    finally:
        csv.field_size_limit(limit)


def _csv_error(path: Path, exc: pa.ArrowException, bad: list) -> BadInputError:
    """pyarrow's CSV messages quote the offending row: say where and what, never the row."""
    shape = _CSV_SHAPE.search(str(exc))
    if bad:
        number, expected, actual = bad[0]
        where = f"data row {number - 1} (not counting the header)" if number else "a row"
        return BadInputError(
            f"{path}: CSV parse error: {where} has {actual} fields where the header has "
            f"{expected}. Quote fields that contain commas, quotes or line breaks, close every "
            "quote, and ingest again"
        )
    if shape:
        return BadInputError(
            f"{path}: CSV parse error: a row has {shape[2]} fields where the header has "
            f"{shape[1]}. Quote fields that contain commas, quotes or line breaks, close every "
            "quote, and ingest again"
        )
    return BadInputError(
        f"{path} is not a readable CSV file with a header (the parser's message is not shown: "
        "it may quote the file's content). Check that it is comma-separated with one header "
        "line, or convert it to Parquet or JSONL"
    )


def _json_int(digits: str) -> int:
    """A JSON integer, refused with a clear message past Python's conversion limit
    (``sys.get_int_max_str_digits``; a ValueError deep in the JSON decoder otherwise)."""
    try:
        return int(digits)
    except ValueError:
        raise _TooLong(len(digits.lstrip("-"))) from None


class _TooLong(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _loads(text: str, path: Path, where: str):
    try:
        return json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{path}{where} is not valid JSON: {exc.msg}") from exc
    except _TooLong as exc:
        raise BadInputError(
            f"{path}{where} holds a JSON integer of {exc.digits} digits, more than the "
            f"{sys.get_int_max_str_digits()} this Python reads; write such ids as strings "
            "(quoted) and ingest again. Nothing was stored"
        ) from None
    except RecursionError as exc:
        raise BadInputError(
            f"{path}{where}: JSON nested too deeply to read; ingest reads flat records "
            '(objects such as {"text": "...", "doc_id": "..."}). Flatten the file and ingest '
            "again"
        ) from exc


def _from_jsonl(text: str, path: Path) -> list[dict[str, Any]]:
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = _loads(line, path, f" line {lineno}")
        if not isinstance(obj, dict):
            raise BadInputError(f"{path} line {lineno} is not a JSON object")
        records.append(obj)
    return records


def _from_json(text: str, path: Path):
    """(column names, number of rows, name -> values, top-level fields that are not lists)."""
    obj = _loads(text, path, "")
    if isinstance(obj, dict):
        lists = {k: v for k, v in obj.items() if isinstance(v, list)}
        if not lists:
            raise BadInputError(
                f'{path}: expected {{"text": [...], ...}} (one list per field, one entry per '
                f"document) or a list of objects; found no list among the keys {names(list(obj))}"
            )
        lengths = {len(v) for v in lists.values()}
        if len(lengths) > 1:
            raise BadInputError(f"{path}: the columns have different lengths {sorted(lengths)}")
        others = [k for k in obj if k not in lists]
        return list(lists), lengths.pop(), lists.__getitem__, others
    if isinstance(obj, list):
        if not all(isinstance(r, dict) for r in obj):
            raise BadInputError(f"{path}: a JSON list must hold one object per document")
        return _records(obj)
    raise BadInputError(f'{path}: expected {{"text": [...]}} or a list of objects')


def _records(records: list[dict[str, Any]]):
    """Columns of a list of objects: every key any object has, in order of appearance
    (``ABSENT`` where an object lacks the key, so the time column can be checked)."""
    found = list(dict.fromkeys(k for r in records for k in r))
    return found, len(records), lambda name: [r.get(name, ABSENT) for r in records], []


def _no_absent(columns: dict[str, list[Any]], mapping: dict[str, str], path: Path) -> None:
    """Refuse a record file whose time key only some objects have: whether the file is
    timestamped (which rejects rows without a time, and fixes whether later files need
    one) must not hang on one document's keys. Elsewhere a missing key is a null value."""
    if "ts" in columns:
        missing = sum(v is ABSENT for v in columns["ts"])
        if missing:
            raise BadInputError(
                f"{path}: {missing} of {len(columns['ts'])} objects lack the time key "
                f"{quote(mapping['ts'])}: give every object a time, or no object one"
            )
    for values in columns.values():
        for i, v in enumerate(values):
            if v is ABSENT:
                values[i] = None
