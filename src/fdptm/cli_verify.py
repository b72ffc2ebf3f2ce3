"""``fdptm verify``: check what was published, and hand auditors the key to check it with.

* ``fdptm verify --release DIR [--key PUB]``: the release's signature (against its own
  ``signer.pub``, and against the publisher's public key ``PUB`` when given) and its files
  against the manifest's sha256 (``fdptm.load_release``). Exit 0 with a short report when
  the release is intact, 1 with the check that failed when it is not, 2 for bad input (not
  a release directory, a key that cannot be read).
* ``fdptm verify --dataset NAME [--head SEQ:HASH]``: the dataset's ledger against its
  hash chain, every published release's files against the manifest hash the chain holds
  (and their signatures), and the spend against the cap (``storage.verification``); exit 1
  with every difference found. It prints the chain's head to keep for the next audit.
* ``fdptm verify --public-key``: the public key this workspace (or ``$FDPTM_SIGNING_KEY``)
  signs releases with, in PEM, to give auditors out of band.
"""

from __future__ import annotations

import argparse

from fdptm.errors import BadInputError

DESCRIPTION = (
    "Check a release's signature and files, or a dataset's ledger and releases against its "
    "hash chain, or print the public key releases are signed with. Exit codes: 0 intact "
    "(signed by PUB when --key is given), 1 not (a file, the manifest or a ledger row "
    "changed, a signature is missing or bad, another key signed it, the spend exceeds the "
    "cap), 2 bad input (not a release directory, a key that cannot be read, no such dataset)."
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
        "--dataset",
        metavar="NAME",
        help="a dataset: its ledger against the hash chain, its releases, its cap",
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
        help="the publisher's public key (a file holding PEM or 64 hex digits, or the hex "
        "digits), obtained out of band: the release (with --dataset, each release) must be "
        "signed by it",
    )
    verify.add_argument(
        "--head",
        metavar="SEQ:HASH",
        help="with --dataset: a head an earlier verify printed; the chain must still hold it",
    )
    workspace(verify)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.public_key:
        if args.key is not None:
            raise BadInputError(
                "--key is the key to check a release against: give it with --release DIR"
            )
        return _public_key(args)
    if args.head is not None and args.dataset is None:
        raise BadInputError("--head is a head of a dataset's chain: give it with --dataset")
    if args.dataset is not None:
        return _dataset(args)
    return _release(args)


def _dataset(args: argparse.Namespace) -> int:
    from fdptm.storage.verification import parse_head, verify_dataset
    from fdptm.storage.workspace import Workspace

    head = None if args.head is None else parse_head(args.head)
    workspace = Workspace.resolve(args.workspace).require()
    found = verify_dataset(workspace, args.dataset, head, key=args.key)
    print(f"dataset:   {found.dataset}")
    print(f"chain:     {found.events} events; head {found.head} (keep it: --head)")
    print(f"releases:  {found.releases} checked against their recorded manifest hashes")
    if found.ok:
        print("verdict:   OK")
        return 0
    print(f"verdict:   FAILED ({len(found.problems)} problem(s))")
    for problem in found.problems:
        print(f"  - {problem}")
    return 1


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
    pinned = args.key is not None
    print("verdict:   OK" + ("" if pinned else " (integrity only, not authenticated: --key PUB)"))
    return 0
