"""``fdptm verify``: check what was published, and hand auditors the key to check it with.

* ``fdptm verify --release DIR [--key PUB]``: the release's signature (against its own
  ``signer.pub``, and against the publisher's public key ``PUB`` when given) and its files
  against the manifest's sha256 (``fdptm.load_release``). Exit 0 with a short report when
  the release is intact, 1 with the check that failed when it is not, 2 for bad input (not
  a release directory, a key that cannot be read).
* ``fdptm verify --public-key``: the public key this workspace (or ``$FDPTM_SIGNING_KEY``)
  signs releases with, in PEM, to give auditors out of band.

What to verify is one option of a mutually exclusive group, so further targets (a
dataset's ledger, say) join it as options of their own.
"""

from __future__ import annotations

import argparse

from fdptm.errors import BadInputError

DESCRIPTION = (
    "Check a release's signature and files, or print the public key releases are signed "
    "with. Exit codes: 0 the release is intact (signed by PUB when --key is given), 1 it is "
    "not (a file or the manifest changed, a signature is missing or bad, or another key "
    "signed it), 2 bad input (not a release directory, a key that cannot be read)."
)


def add_parser(sub, workspace) -> None:
    verify = sub.add_parser(
        "verify",
        help="check a release's signature and files; print the signing public key",
        description=DESCRIPTION,
    )
    what = verify.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--release",
        metavar="DIR",
        help="a release directory (<workspace>/releases/<run_id>, a copy, or an fsspec URL)",
    )
    what.add_argument(
        "--public-key",
        action="store_true",
        help="print the public key releases are signed with (PEM, as in a release's "
        "signer.pub): $FDPTM_SIGNING_KEY's, else the workspace's (made now if no release "
        "made it yet)",
    )
    verify.add_argument(
        "--key",
        metavar="PUB",
        help="with --release: the publisher's public key (a file holding PEM or 64 hex "
        "digits, or the hex digits), obtained out of band; the release must be signed by it",
    )
    workspace(verify)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.public_key:
        if args.key is not None:
            raise BadInputError(
                "--key is the key to check a release against: give it with --release DIR"
            )
        return _public_key(args)
    return _release(args)


def _public_key(args: argparse.Namespace) -> int:
    from fdptm import signing
    from fdptm.storage.workspace import Workspace

    print(signing.public_pem(Workspace.resolve(args.workspace)), end="")
    return 0


def _release(args: argparse.Namespace) -> int:
    from fdptm.release import FILES, load_release
    from fdptm.signing import VerificationError
    from fdptm.tasks.sources import is_url, shown

    where = shown(args.release) if is_url(args.release) else args.release
    try:
        release = load_release(args.release, args.key)
    except VerificationError as exc:
        print(f"release:   {where}")
        print(f"verdict:   FAILED: {exc}")
        return 1
    if release.signer is None:
        signature = (
            "NONE: the release is not signed (published before fdptm signed releases), so "
            "nothing authenticates its manifest"
        )
    elif args.key is not None:
        signature = f"valid, by the key you gave (Ed25519 {release.signer})"
    else:
        signature = (
            f"valid, by its own signer.pub (Ed25519 {release.signer}); not pinned: give --key "
            "PUB to check that it is the publisher's"
        )
    print(f"release:   {release.path} (run {release.run_id})")
    print(f"files:     {', '.join(FILES[:2])} match the sha256 in {FILES[2]}")
    print(f"signature: {signature}")
    g = release.manifest.get("guarantee") or {}
    print(f"guarantee: {g.get('statement')}, {g.get('adjacency')}-level adjacency")
    print("verdict:   OK")
    return 0
