"""Contribution bounding: caps hold, are seeded, and are per-author functions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fdptm.kernels import siphash
from fdptm.tasks.bounding import Bounds, _keys, bound_contributions


def _table(rows):
    return pa.table(
        {
            "doc_id": [r[0] for r in rows],
            "author_id": [r[1] for r in rows],
            "tokens": pa.array([r[2] for r in rows], pa.list_(pa.string())),
        }
    )


ROWS = [(f"d{i}", f"a{i % 3}", [f"w{j}" for j in range(i % 7 + 1)]) for i in range(30)]


def _kept(table):
    return dict(
        zip(table.column("doc_id").to_pylist(), table.column("tokens").to_pylist(), strict=True)
    )


def test_caps_hold():
    out = bound_contributions(_table(ROWS), Bounds(max_docs_per_author=4, max_tokens_per_doc=3), 1)
    per_author = {}
    for a in out.column("author_id").to_pylist():
        per_author[a] = per_author.get(a, 0) + 1
    assert per_author == {"a0": 4, "a1": 4, "a2": 4}
    assert max(len(t) for t in out.column("tokens").to_pylist()) == 3


def test_deterministic_given_seed_and_varies_with_it():
    b = Bounds(max_docs_per_author=3, max_tokens_per_doc=10)
    one = _kept(bound_contributions(_table(ROWS), b, 5))
    assert one == _kept(bound_contributions(_table(ROWS), b, 5))
    assert one != _kept(bound_contributions(_table(ROWS), b, 6))


def test_an_authors_sample_ignores_other_authors():
    b = Bounds(max_docs_per_author=2, max_tokens_per_doc=10)
    full = _kept(bound_contributions(_table(ROWS), b, 9))
    only_a1 = _kept(bound_contributions(_table([r for r in ROWS if r[1] == "a1"]), b, 9))
    assert {d: t for d, t in full.items() if d in {r[0] for r in ROWS if r[1] == "a1"}} == only_a1


def test_siphash_matches_the_reference_test_vectors():
    """SipHash-2-4 with key 00..0f (the reference implementation's vectors): the empty
    message and the 15-byte message 00..0e, and the 8-byte boundary (00..07)."""
    key = bytes(range(16))
    k0, k1 = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
    message = np.arange(64, dtype=np.uint8)
    assert siphash.siphash24(k0, k1, message, 0, 0) == 0x726FDB47DD0E0E31
    assert siphash.siphash24(k0, k1, message, 0, 15) == 0xA129CA6149BE45E5
    assert siphash.siphash24(k0, k1, message, 0, 8) == 0x93F5F5799A932462


def test_keys_are_siphash_of_author_and_document_per_row():
    """The vectorised keys equal SipHash of "author\\x1fdoc" row by row, also on a sliced,
    multi-chunk table with non-ASCII ids."""
    rows = [(f"d{i}é", f"auteur{i % 4}", ["w"]) for i in range(50)]
    table = pa.concat_tables([_table(rows[:20]), _table(rows[20:])]).slice(5, 40)
    seed = 2**64 - 3
    key = seed.to_bytes(16, "little")
    k0, k1 = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
    expected = []
    for a, d in zip(
        table.column("author_id").to_pylist(), table.column("doc_id").to_pylist(), strict=True
    ):
        raw = np.frombuffer(f"{a}\x1f{d}".encode(), dtype=np.uint8)
        expected.append(siphash.siphash24(k0, k1, raw, 0, len(raw)))
    keys = _keys(seed, table.column("author_id"), table.column("doc_id"))
    assert keys.tolist() == expected


def test_authors_within_the_cap_keep_every_document_in_order():
    out = bound_contributions(_table(ROWS), Bounds(max_docs_per_author=10, max_tokens_per_doc=2), 3)
    assert out.column("doc_id").to_pylist() == [r[0] for r in ROWS]
    assert out.column("tokens").to_pylist() == [r[2][:2] for r in ROWS]


def _reference_sample(table: pa.Table, cap: int, seed: int) -> list[str]:
    """Each author's ``cap`` documents of smallest key over the whole table, in row order:
    the definition, with every row hashed at once."""
    keys = _keys(seed, table.column("author_id"), table.column("doc_id")).tolist()
    authors = table.column("author_id").to_pylist()
    kept = set()
    for author in set(authors):
        rows = [i for i, a in enumerate(authors) if a == author]
        kept |= set(sorted(rows, key=lambda i: (keys[i], i))[:cap])
    return [table.column("doc_id")[i].as_py() for i in sorted(kept)]


def test_ranking_by_ranges_of_authors_equals_the_definition(monkeypatch):
    """The authors over the cap are ranked per range of authors (the unit of work that runs
    on a Dask cluster); whatever the ranges, the kept documents are the definition's.
    Authors of very different sizes (1 to 60 documents), interleaved rows."""
    from fdptm.tasks import bounding

    rng = np.random.default_rng(11)
    authors = [f"u{a}" for a in rng.zipf(1.6, 900) % 40]
    table = _table([(f"doc{i}", a, ["w"]) for i, a in enumerate(authors)])
    expected = _reference_sample(table, 5, 77)
    for rows in (1, 7, 64, 1 << 20):
        monkeypatch.setattr(bounding, "RANGE_ROWS", rows)
        out = bound_contributions(table, Bounds(max_docs_per_author=5), 77)
        assert out.column("doc_id").to_pylist() == expected, rows
