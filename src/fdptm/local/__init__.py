"""The device side of local DP (LP-LDA, hdp-lda-lp-lda-olp-lda.txt section V-A).

Raw text never leaves the device: it runs PRE, encodes the document as a bit vector over a
public vocabulary and sends only its randomised response. This package needs numpy,
pyarrow, numba, nltk (PRE's lemmatizer) and ``cryptography`` (the keystream), never
Prefect, DuckDB or the server's modules.

    from fdptm.local import Flip, LocalVocabulary, randomize, write_reports
    vocabulary = LocalVocabulary.load("vocabulary.json")
    reports = randomize(["my text"], vocabulary, Flip.from_f(0.1))
    write_reports("reports.parquet", reports, vocabulary, Flip.from_f(0.1))
"""

from fdptm.local.flip import Flip
from fdptm.local.randomizer import KeyStream, randomize, randomize_tokens
from fdptm.local.reports import write as write_reports
from fdptm.local.vocabulary import LocalVocabulary

__all__ = ["Flip", "KeyStream", "LocalVocabulary", "randomize", "randomize_tokens", "write_reports"]
