"""Where an input file comes from: a local path, or an object store through fsspec.

``fdptm ingest s3://bucket/prefix/file.jsonl`` (any fsspec URL whose driver is installed:
``s3://`` with ``pip install 'fdptm[s3]'``, which brings s3fs) copies the object to a private
temporary directory (mode 0700, removed afterwards), and ingest then reads that local copy
exactly as it reads a local file: the same formats, checks and sha256 of the bytes parsed.
Credentials and endpoints come from the driver's usual configuration (for S3: the AWS
environment variables or profile; ``AWS_ENDPOINT_URL`` or fsspec's
``FSSPEC_S3_ENDPOINT_URL`` for an S3-compatible server). What the catalog records as the
source is the URL without user information and without a query string (a pre-signed URL's
query is a credential).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from fdptm.errors import BadInputError
from fdptm.storage.objectstore import filesystem


def is_url(path: str | Path) -> bool:
    """Whether ``path`` names an object through a URL scheme other than ``file``."""
    text = str(path)
    scheme = urlsplit(text).scheme if "://" in text else ""
    return bool(scheme) and scheme != "file"


def shown(url: str) -> str:
    """``url`` without user information and without its query or fragment."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@contextmanager
def local_input(path: str | Path) -> Iterator[tuple[Path, str]]:
    """(a local file holding ``path``'s bytes, the source to record).

    A local path is used as it is (resolved). A URL is copied to a private temporary
    directory first, under the object's own name (so its extension still tells the format),
    and the copy is removed when the block ends; an input error raised in the block names
    the URL instead of the copy."""
    if not is_url(path):
        text = str(path)
        local = Path(text[len("file://") :] if text.startswith("file://") else text)
        local = local.expanduser().resolve()
        yield local, str(local)
        return
    url = str(path)
    name = PurePosixPath(urlsplit(url).path).name
    if not name:
        raise BadInputError(f"input {shown(url)} names no file (it ends with '/')")
    fs, remote = filesystem(url, "inputs")
    folder = Path(tempfile.mkdtemp(prefix="fdptm-input-"))
    try:
        local = folder / name
        try:
            if fs.info(remote).get("type") != "file":
                raise BadInputError(f"input {shown(url)} is not a file")
            fs.get_file(remote, str(local))
        except FileNotFoundError as exc:
            raise BadInputError(f"input file {shown(url)} does not exist") from exc
        except BadInputError:
            raise
        except Exception as exc:  # the driver's own errors: network, credentials, bucket
            raise BadInputError(
                f"could not read {shown(url)} ({type(exc).__name__}): check the URL, the "
                "store's credentials and endpoint (for S3: AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), and that the object exists"
            ) from exc
        try:
            yield local, shown(url)
        except BadInputError as exc:  # name the URL, not the temporary copy
            raise BadInputError(str(exc).replace(str(local), shown(url))) from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)
