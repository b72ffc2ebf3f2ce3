"""Signed releases: the publisher's Ed25519 key, a release's detached signature, its checks.

A release directory is public and gets copied around. Its manifest records the sha256 of
the matrix and the vocabulary, but anyone can rewrite the matrix and the recorded sha256
with it, or edit the guarantee's epsilon: hashes alone cannot tell. So at publish the exact
bytes of ``manifest.json`` (which pin both Parquet files by their sha256) are signed with
Ed25519 (RFC 8032), and the release carries two more files:

* ``manifest.sig``: the signature, 64 bytes, raw binary;
* ``signer.pub``: the signer's public key, PEM (SubjectPublicKeyInfo, as ``openssl pkey
  -pubout`` writes it).

Both are public: the signature is a deterministic function of the public manifest and the
key, and reveals nothing about the data.

Checks (``check``): a signed release is always checked against its own ``signer.pub``
(integrity: the manifest is what that key signed). That alone cannot tell a forger, who can
sign an edited manifest with a key of their own and ship its ``signer.pub``; given the
publisher's public key out of band (``fdptm verify --public-key`` prints it), the release
must also be signed by that key (authenticity). Releases published before signing have
neither file: they load without a key, and are refused when a key is given.

The private key is ``$FDPTM_SIGNING_KEY`` (a path: the way several workers on several
hosts share one key), else ``<workspace>/signing.key``, created (0600, atomically) at the
first publish. Either is PEM PKCS8, unencrypted, and is refused when group or others may
read it: whoever reads it can sign releases in the organisation's name.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fdptm.errors import BadInputError
from fdptm.storage.workspace import Workspace, create_private

ENV_VAR = "FDPTM_SIGNING_KEY"
KEY_FILE = "signing.key"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
PUBLIC_KEY = "signer.pub"
SIGNATURE_FILES = (SIGNATURE, PUBLIC_KEY)
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
_MAKE_ONE = "`(umask 077; openssl genpkey -algorithm ed25519 -out signing.pem)` makes one"


class VerificationError(BadInputError):
    """A release is not what was published: a file changed after it was signed, its
    signature is bad or missing, or another key than the one given signed it.

    A BadInputError, so nothing is loaded; ``fdptm verify`` exits 1 for it (and 2 for a
    path that is not a release or a key that cannot be read)."""


def hex_of(key: Ed25519PublicKey) -> str:
    """The public key as 64 hex digits (its raw 32 bytes): short enough to compare by eye or
    read out over the phone, and accepted wherever a public key is (``public_key``)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def pem_of(key: Ed25519PublicKey) -> bytes:
    """The public key in PEM (SubjectPublicKeyInfo): the bytes of a release's ``signer.pub``."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def private_key(workspace: Workspace) -> Ed25519PrivateKey:
    """The key releases are signed with: ``$FDPTM_SIGNING_KEY``'s file when set (required
    with a PostgreSQL catalog), else the workspace's ``signing.key``, created at the first
    call (0600, written in full and then linked into place, so a concurrent publisher uses
    the same key). BadInputError (exit 2)
    for a key that is missing (from the variable's path), unreadable, open to group or
    others, or not an unencrypted Ed25519 private key in PEM."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        path = Path(chosen).expanduser()
        origin = f"${ENV_VAR} ({path})"
        remedy = (
            f"point ${ENV_VAR} at the deployment's Ed25519 signing key (PEM PKCS8, mode 0600; "
            f"{_MAKE_ONE}), or unset it to sign with <workspace>/{KEY_FILE}"
        )
    elif workspace.catalog is not None:
        raise BadInputError(
            f"a PostgreSQL catalog is shared by several hosts: their releases are signed with "
            f"one key, which ${ENV_VAR} names on every publishing host ({_MAKE_ONE}); a key "
            "of each host's own would tell in every release which host published it, and "
            "auditors who pinned one key would refuse the others. Nothing was reserved"
        )
    else:
        path = workspace.root / KEY_FILE
        origin = f"the workspace's signing key {path}"
        remedy = (
            f"restore {KEY_FILE} from a backup, or remove it to have a new key made at the next "
            "release (releases already signed keep verifying against their own signer.pub, but "
            "give auditors who pinned the old public key the new one)"
        )
        if not (path.exists() or path.is_symlink()):
            _create(path)
    return _read_private(path, origin, remedy)


def public_pem(workspace: Workspace) -> str:
    """The public key releases are signed with, in PEM (the text of a release's
    ``signer.pub``), for auditors: ``$FDPTM_SIGNING_KEY``'s when set, else the workspace's
    (which must exist; its key is made now if no release made it yet)."""
    if not os.environ.get(ENV_VAR):
        workspace.require()
    return pem_of(private_key(workspace).public_key()).decode("ascii")


def _create(path: Path) -> None:
    """A fresh key, written in full (0600) and linked into place (a concurrent creator
    wins), as ``secret.key`` is (``storage.workspace.create_private``)."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    create_private(path, pem)


def _read_private(path: Path, origin: str, remedy: str) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path``, refused unless it is private to its owner."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if not path.is_file():
            raise BadInputError(f"{origin} is not a file: {remedy}")
        if mode & 0o077:
            raise BadInputError(
                f"{origin} is open to group or others (mode {mode:04o}): whoever reads it can "
                f"sign releases in your name. Make it private with `chmod 600 {path}` (and "
                "replace the key if someone else may have read it)"
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError(f"{origin} does not exist: {remedy}") from None
    except OSError as exc:
        raise BadInputError(f"{origin} cannot be read ({exc.strerror or exc}): {remedy}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInputError(
            f"{origin} is not an unencrypted Ed25519 private key in PEM (PKCS8): {remedy}"
        )
    return key


def sign(folder: Path, key: Ed25519PrivateKey) -> dict[str, str]:
    """Write ``manifest.sig`` and ``signer.pub`` beside the release's ``manifest.json`` in
    ``folder`` (atomically): the signature of the manifest's exact bytes, and the key to
    check it. Their sha256 by name, for the catalog."""
    from fdptm.storage.artifacts import atomic_write

    manifest = (folder / MANIFEST).read_bytes()
    written = {SIGNATURE: key.sign(manifest), PUBLIC_KEY: pem_of(key.public_key())}
    return {
        name: atomic_write(folder / name, lambda tmp, data=data: tmp.write_bytes(data))
        for name, data in written.items()
    }


def public_key(key: str | os.PathLike | bytes) -> Ed25519PublicKey:
    """A public key given by a caller: a path to a key file, or the key itself, as PEM text,
    64 hex digits, or (bytes) raw 32 bytes; a file holds PEM or hex. BadInputError (exit 2)
    for a file that cannot be read or anything that is not an Ed25519 public key."""
    if isinstance(key, bytes):
        return _parse_public(key, "the key given")
    text = os.fspath(key)
    if text.lstrip().startswith("-----BEGIN") or _HEX_KEY.fullmatch(text.strip()):
        return _parse_public(text.encode("ascii", "replace"), "the key given")
    path = Path(text).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(
            f"the public key file {path} cannot be read ({exc.strerror or exc}): give the "
            "publisher's Ed25519 public key as a file (PEM or 64 hex digits, as `fdptm verify "
            "--public-key` prints it) or as the hex digits themselves"
        ) from None
    return _parse_public(data, f"the public key file {path}")


def _parse_public(data: bytes, what: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM, 64 hex digits or raw 32 bytes."""
    stripped = data.strip()
    key = None
    if stripped.startswith(b"-----BEGIN"):
        if b"PRIVATE KEY" in stripped:
            raise BadInputError(
                f"{what} is a private key: never hand it out. Give the public key instead "
                "(`fdptm verify --public-key` prints it, or the release's signer.pub)"
            )
        with suppress(ValueError, UnsupportedAlgorithm):
            key = serialization.load_pem_public_key(stripped)
    elif _HEX_KEY.fullmatch(stripped.decode("ascii", "replace")):
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(stripped.decode("ascii")))
    elif len(data) == 32:
        key = Ed25519PublicKey.from_public_bytes(data)
    if not isinstance(key, Ed25519PublicKey):
        raise BadInputError(
            f"{what} is not an Ed25519 public key (PEM, 64 hex digits, or raw 32 bytes): give "
            "the publisher's key as `fdptm verify --public-key` prints it"
        )
    return key


def check(
    files: Mapping[str, bytes], key: Ed25519PublicKey | None, where: str
) -> Ed25519PublicKey | None:
    """Check the signature of a release's files (its name to bytes; ``where`` names it in
    messages): the signer's key, or None for an unsigned release, which is refused when
    ``key`` is given. VerificationError when a signature file is missing, ``signer.pub`` is
    not ``key``, or ``manifest.sig`` is not its signature of ``manifest.json``."""
    present = [name for name in SIGNATURE_FILES if name in files]
    if not present:
        if key is not None:
            raise VerificationError(
                f"{where} is not signed (no {SIGNATURE}, no {PUBLIC_KEY}), so it cannot be "
                f"checked against the key you gave ({hex_of(key)}): a signed release lost its "
                "signature, or this is a release published before fdptm signed releases. Get "
                "the published copy with its signature; load an old release without a key "
                "only if you trust where it came from"
            )
        return None
    if len(present) == 1:
        missing = next(n for n in SIGNATURE_FILES if n not in files)
        raise VerificationError(
            f"{where} has {present[0]} but no {missing}: a signed release carries both, so a "
            "signature file was removed or not copied; get the published copy"
        )
    try:
        signer = _parse_public(files[PUBLIC_KEY], f"{where}/{PUBLIC_KEY}")
    except BadInputError as exc:
        raise VerificationError(f"{exc}; get the published copy of the release") from None
    if key is not None and hex_of(signer) != hex_of(key):
        raise VerificationError(
            f"{where} is signed by the key {hex_of(signer)}, not by the key you gave "
            f"({hex_of(key)}): its signature and {PUBLIC_KEY} were replaced, or it comes from "
            "another publisher. Do not trust it; get the release from its publisher"
        )
    try:
        signer.verify(files[SIGNATURE], files[MANIFEST])
    except InvalidSignature:
        raise VerificationError(
            f"{where}/{SIGNATURE} is not a valid signature of {MANIFEST} by {PUBLIC_KEY}: the "
            "manifest (its guarantee, or the sha256 of the files it pins) or the signature was "
            "changed after the release. Do not trust it; get the published copy"
        ) from None
    return signer
