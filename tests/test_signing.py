"""Signed releases on a real release: publish signs the manifest's exact bytes with the
workspace's Ed25519 key (or $FDPTM_SIGNING_KEY's); load_release and `fdptm verify` refuse a
rewritten matrix whose sha256 was updated, an edited epsilon, a signature by another key
when the publisher's key is pinned, and a removed signature; unsigned (older) releases load
without a key and are refused with one; the signing key must be private."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import fdptm
from fdptm import signing
from fdptm.cli import main
from fdptm.errors import BadInputError
from fdptm.release import FILES, load_release
from fdptm.signing import VerificationError
from fdptm.storage.catalog import Catalog
from fdptm.storage.workspace import Workspace

pytestmark = pytest.mark.usefixtures("prefect_harness")

RELEASE = ["release", "--dataset", "small", "--epsilon", "20", "--delta", "1e-5"]
RELEASE += ["--topics", "4", "--iterations", "10", "--seed", "5", "--no-progress"]


@pytest.fixture(scope="module")
def released(tmp_path_factory, prefect_harness):
    """A real seeded release (a test run, NOT DP) of 80 one-line documents, through the
    CLI: its workspace, run id and directory."""
    from fdptm.tasks.ingest import ingest

    root = tmp_path_factory.mktemp("signing")
    workspace = Workspace.resolve(root / "ws")
    text = root / "small.txt"
    text.write_text(
        "\n".join(["apple banana cherry grape"] * 40 + ["durian elderberry figs lemon"] * 40)
    )
    ingest(text, "small", workspace)
    assert main([*RELEASE, "--workspace", str(workspace.root)]) == 0
    row = Catalog(workspace).query("SELECT run_id, path FROM releases")[0]
    return workspace, row["run_id"], workspace.root / row["path"]


@pytest.fixture
def copy(released, tmp_path) -> Path:
    """A copy of the release to tamper with."""
    target = tmp_path / "copy"
    shutil.copytree(released[2], target)
    return target


@pytest.fixture
def pub(released, tmp_path) -> Path:
    """The publisher's public key as an auditor holds it: `fdptm verify --public-key`'s
    output, saved to a file."""
    workspace = released[0]
    path = tmp_path / "publisher.pub"
    path.write_text(fdptm.Workspace(workspace.root).public_key())
    return path


def verify(capsys, *args: str) -> tuple[int, str]:
    """`fdptm verify ARGS` in-process: its exit code and its output (stdout and stderr)."""
    capsys.readouterr()
    code = main(["verify", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def rewrite_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def resign(folder: Path, key: Ed25519PrivateKey) -> None:
    """A forger's signature: the manifest signed by ``key``, whose public key replaces
    signer.pub."""
    signing.sign(folder, key)


# --- what publish writes ----------------------------------------------------------------


def test_publish_signs_the_manifest_bytes_with_the_workspace_key(released, capsys, pub):
    workspace, run_id, path = released
    names = sorted(p.name for p in path.iterdir())
    assert names == sorted([*FILES, "manifest.sig", "signer.pub"])
    key_file = workspace.root / "signing.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    private = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    public = private.public_key()
    assert (path / "signer.pub").read_bytes() == signing.pem_of(public)
    assert pub.read_bytes() == signing.pem_of(public)
    public.verify((path / "manifest.sig").read_bytes(), (path / "manifest.json").read_bytes())
    release = load_release(path, key=pub)
    assert release.run_id == run_id and release.signer == signing.hex_of(public)
    # both files are public artifacts of the release, like the other three
    rows = Catalog(workspace).query(
        "SELECT name, visibility, sha256 FROM artifacts WHERE name LIKE 'release/%'"
    )
    shas = {r["name"].rsplit("/", 1)[1]: r["sha256"] for r in rows}
    assert {r["visibility"] for r in rows} == {"public"}
    for name in ("manifest.sig", "signer.pub"):
        assert shas[name] == hashlib.sha256((path / name).read_bytes()).hexdigest()
    # the key an auditor is given, printed by the CLI; the verify report
    code, out = verify(capsys, "--public-key", "--workspace", str(workspace.root))
    assert code == 0 and out == pub.read_text()
    code, out = verify(capsys, "--release", str(path), "--key", str(pub))
    assert code == 0 and "verdict:   OK" in out and "by the key you gave" in out
    code, out = verify(capsys, "--release", str(path))
    assert code == 0 and "its own signer.pub" in out and signing.hex_of(public) in out


def test_the_key_is_accepted_as_a_file_pem_hex_or_bytes(released, pub):
    path = released[2]
    public = signing.public_key(pub)
    for key in (
        pub,
        str(pub),
        pub.read_text(),
        pub.read_bytes(),
        signing.hex_of(public),
        bytes.fromhex(signing.hex_of(public)),
    ):
        assert load_release(path, key=key).signer == signing.hex_of(public)
    hex_file = pub.with_name("publisher.hex")
    hex_file.write_text(signing.hex_of(public) + "\n")
    assert fdptm.Workspace(released[0].root).release(released[1], key=hex_file).n_topics == 4


def test_a_signed_release_saved_elsewhere_stays_signed(released, pub, tmp_path):
    release = load_release(released[2], key=pub)
    release.save(tmp_path / "saved")
    for name in ("manifest.sig", "signer.pub"):
        assert (tmp_path / "saved" / name).read_bytes() == (released[2] / name).read_bytes()
    assert load_release(tmp_path / "saved", key=pub).signer == release.signer


# --- tampering -----------------------------------------------------------------------------


def test_a_rewritten_matrix_with_its_sha256_updated_is_refused(copy, pub, capsys):
    """(a) the matrix rewritten, and its new sha256 written into the manifest."""
    table = pq.read_table(copy / "topic_word.parquet")
    rows = table.column("probabilities").to_pylist()
    forged = table.set_column(
        table.schema.get_field_index("probabilities"),
        "probabilities",
        pa.array(rows[::-1], table.schema.field("probabilities").type),
    )
    pq.write_table(forged, copy / "topic_word.parquet")
    sha = hashlib.sha256((copy / "topic_word.parquet").read_bytes()).hexdigest()
    rewrite_manifest(copy, lambda m: m["files"]["topic_word.parquet"].update(sha256=sha))
    for key in (None, pub):
        with pytest.raises(VerificationError, match=r"not a valid signature of manifest\.json"):
            load_release(copy, key=key)
    code, out = verify(capsys, "--release", str(copy), "--key", str(pub))
    assert code == 1 and "verdict:   FAILED" in out and "not a valid signature" in out
    assert verify(capsys, "--release", str(copy))[0] == 1


def test_a_rewritten_matrix_alone_is_refused(copy, pub, capsys):
    """The matrix rewritten, the manifest left alone: its sha256 gives it away."""
    table = pq.read_table(copy / "topic_word.parquet")
    pq.write_table(table.slice(1), copy / "topic_word.parquet")
    with pytest.raises(VerificationError, match="does not match the sha256"):
        load_release(copy, key=pub)
    code, out = verify(capsys, "--release", str(copy))
    assert code == 1 and "does not match the sha256" in out


def test_an_edited_epsilon_is_refused(copy, pub, capsys):
    """(b) ``guarantee.epsilon`` edited in the manifest."""
    rewrite_manifest(copy, lambda m: m["guarantee"].update(epsilon=0.1))
    for key in (None, pub):
        with pytest.raises(VerificationError, match=r"manifest\.sig is not a valid signature"):
            load_release(copy, key=key)
    code, out = verify(capsys, "--release", str(copy), "--key", str(pub))
    assert code == 1 and "FAILED" in out


def test_a_signature_by_another_key_is_refused_when_the_key_is_pinned(copy, pub, capsys):
    """(c) an edited manifest re-signed by a forger, whose signer.pub replaces the
    publisher's: consistent in itself, so only the pinned key tells."""
    rewrite_manifest(copy, lambda m: m["guarantee"].update(epsilon=0.1))
    forger = Ed25519PrivateKey.generate()
    resign(copy, forger)
    loaded = load_release(copy)  # integrity alone holds: the forger's key signed it
    assert loaded.signer == signing.hex_of(forger.public_key())
    with pytest.raises(VerificationError, match="not by the key you gave"):
        load_release(copy, key=pub)
    code, out = verify(capsys, "--release", str(copy), "--key", str(pub))
    assert code == 1 and "not by the key you gave" in out
    code, out = verify(capsys, "--release", str(copy))
    assert code == 0 and signing.hex_of(forger.public_key()) in out and "not pinned" in out


def test_a_removed_signature_is_refused_when_a_key_is_given(copy, pub, capsys):
    """(d) both signature files removed: the release looks like one from before signing,
    which loads without a key and is refused with one."""
    (copy / "manifest.sig").unlink()
    (copy / "signer.pub").unlink()
    assert load_release(copy).signer is None
    with pytest.raises(VerificationError, match="is not signed"):
        load_release(copy, key=pub)
    code, out = verify(capsys, "--release", str(copy), "--key", str(pub))
    assert code == 1 and "is not signed" in out
    code, out = verify(capsys, "--release", str(copy))
    assert code == 0 and "NONE: the release is not signed" in out


def test_half_a_signature_is_refused_even_without_a_key(copy, capsys):
    (copy / "manifest.sig").unlink()
    with pytest.raises(VerificationError, match=r"has signer\.pub but no manifest\.sig"):
        load_release(copy)
    assert verify(capsys, "--release", str(copy))[0] == 1


def test_an_unsigned_release_of_an_older_version_loads_without_a_key(released, pub, tmp_path):
    """A release as versions before signing published it: the three files only."""
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in FILES:
        shutil.copy2(released[2] / name, legacy / name)
    release = load_release(legacy)
    assert release.run_id == released[1] and release.signer is None
    with pytest.raises(VerificationError, match="is not signed"):
        load_release(legacy, key=pub)
    release.save(tmp_path / "saved")  # stays unsigned: nothing is invented
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == sorted(FILES)


def test_a_release_on_an_object_store_is_checked_too(released, pub):
    """fsspec's in-memory filesystem as the store: the signature files are fetched with the
    release, and a tampered copy fails with the same error class."""
    import fsspec

    fs = fsspec.filesystem("memory")
    names = [*FILES, "manifest.sig", "signer.pub"]
    for name in names:
        fs.pipe_file(f"/signed/releases/r/{name}", (released[2] / name).read_bytes())
    try:
        release = load_release("memory://signed/releases/r", key=pub)
        assert release.signer == signing.hex_of(signing.public_key(pub))
        manifest = json.loads((released[2] / "manifest.json").read_text())
        manifest["guarantee"]["epsilon"] = 0.1
        fs.pipe_file("/signed/releases/r/manifest.json", json.dumps(manifest).encode())
        with pytest.raises(VerificationError, match="memory://signed/releases/r"):
            load_release("memory://signed/releases/r")
        for name in ("manifest.sig", "signer.pub"):
            fs.rm_file(f"/signed/releases/r/{name}")
        fs.pipe_file(
            "/signed/releases/r/manifest.json", (released[2] / "manifest.json").read_bytes()
        )
        assert load_release("memory://signed/releases/r").signer is None
        with pytest.raises(VerificationError, match="is not signed"):
            load_release("memory://signed/releases/r", key=pub)
    finally:
        fs.rm("/signed", recursive=True)


# --- bad input: exit 2 ---------------------------------------------------------------------


def test_bad_input_is_exit_2_not_a_failed_check(released, pub, tmp_path, capsys):
    path = released[2]
    code, out = verify(capsys, "--release", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a release directory" in out
    code, out = verify(capsys, "--release", str(path), "--key", str(tmp_path / "missing.pub"))
    assert code == 2 and "cannot be read" in out
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key\n")
    code, out = verify(capsys, "--release", str(path), "--key", str(garbage))
    assert code == 2 and "is not an Ed25519 public key" in out
    # the private key by mistake: refused, and never echoed
    secret = released[0].root / "signing.key"
    code, out = verify(capsys, "--release", str(path), "--key", str(secret))
    assert code == 2 and "is a private key" in out and "PRIVATE KEY-----" not in out
    code, out = verify(capsys, "--public-key", "--key", str(pub))
    assert code == 2 and "--key is the key to check a release against" in out
    with pytest.raises(SystemExit):  # --release and --public-key exclude each other
        main(["verify", "--release", str(path), "--public-key"])
    with pytest.raises(BadInputError) as caught:
        load_release(path, key=garbage)
    assert not isinstance(caught.value, VerificationError)


# --- the signing key -----------------------------------------------------------------------


def write_key(path: Path, key, mode: int = 0o600) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(path, mode)
    return path


def test_the_workspace_key_is_created_once_private_and_kept(workspace):
    workspace.create()
    first = signing.private_key(workspace)
    again = signing.private_key(workspace)
    assert signing.hex_of(first.public_key()) == signing.hex_of(again.public_key())
    key_file = workspace.root / "signing.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert not [p.name for p in workspace.root.iterdir() if p.name.startswith(".signing.key")]


def test_a_workspace_key_open_to_others_is_refused(workspace, capsys):
    workspace.create()
    signing.private_key(workspace)
    key_file = workspace.root / "signing.key"
    os.chmod(key_file, 0o640)
    with pytest.raises(BadInputError, match=r"open to group or others \(mode 0640\)"):
        signing.private_key(workspace)
    os.chmod(key_file, 0o600)
    key_file.write_text("damaged\n")
    with pytest.raises(BadInputError, match="not an unencrypted Ed25519 private key"):
        signing.private_key(workspace)


def test_the_environment_key_overrides_the_workspace_key(released, tmp_path, monkeypatch, capsys):
    """$FDPTM_SIGNING_KEY: the key workers on several hosts share; a release published
    with it is signed by it, and the workspace's own key is left as it was."""
    workspace = released[0]
    shared = write_key(tmp_path / "shared.pem", Ed25519PrivateKey.generate())
    before = (workspace.root / "signing.key").read_bytes()
    published = release_paths(workspace)
    monkeypatch.setenv(signing.ENV_VAR, str(shared))
    assert main([*RELEASE, "--workspace", str(workspace.root)]) == 0
    (second,) = release_paths(workspace) - published
    public = signing.private_key(workspace).public_key()
    assert (second / "signer.pub").read_bytes() == signing.pem_of(public)
    assert (workspace.root / "signing.key").read_bytes() == before
    code, out = verify(capsys, "--public-key", "--workspace", str(workspace.root))
    assert code == 0 and out.encode() == signing.pem_of(public)
    assert load_release(second, key=signing.pem_of(public)).n_topics == 4
    with pytest.raises(VerificationError, match="not by the key you gave"):
        load_release(released[2], key=signing.pem_of(public))  # the workspace key's release


def release_paths(workspace: Workspace) -> set[Path]:
    return {
        workspace.root / r["path"] for r in Catalog(workspace).query("SELECT path FROM releases")
    }


def test_a_key_that_cannot_sign_is_refused_before_anything_is_reserved(
    released, tmp_path, monkeypatch, capsys
):
    """The key is checked with the workspace's secret key, before the reservation: a bad
    one is refused (exit 2) with nothing reserved or published, so it can never fail a run
    after its spend; once fixed, the next release is signed by it."""
    workspace = released[0]
    key = write_key(tmp_path / "open.pem", Ed25519PrivateKey.generate(), 0o644)
    published = release_paths(workspace)
    entries = Catalog(workspace).query("SELECT entry_id FROM ledger")
    monkeypatch.setenv(signing.ENV_VAR, str(key))
    capsys.readouterr()
    assert main([*RELEASE, "--workspace", str(workspace.root)]) == 2
    assert "open to group or others (mode 0644)" in capsys.readouterr().err
    assert release_paths(workspace) == published
    assert Catalog(workspace).query("SELECT entry_id FROM ledger") == entries
    os.chmod(key, 0o600)
    assert main([*RELEASE, "--workspace", str(workspace.root)]) == 0
    (new,) = release_paths(workspace) - published
    public = signing.private_key(workspace).public_key()
    assert load_release(new, key=signing.hex_of(public)).path == new


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("open", r"open to group or others \(mode 0644\)"),
        ("directory", "is not a file"),
        ("garbage", "not an unencrypted Ed25519 private key"),
        ("ecdsa", "not an unencrypted Ed25519 private key"),
        ("encrypted", "not an unencrypted Ed25519 private key"),
    ],
)
def test_a_bad_environment_key_is_refused(case, message, workspace, tmp_path, monkeypatch):
    path = tmp_path / "key.pem"
    if case == "open":
        write_key(path, Ed25519PrivateKey.generate(), 0o644)
    elif case == "directory":
        path.mkdir()
    elif case == "garbage":
        path.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
        os.chmod(path, 0o600)
    elif case == "ecdsa":
        write_key(path, ec.generate_private_key(ec.SECP256R1()))
    elif case == "encrypted":
        path.write_bytes(
            Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"passphrase"),
            )
        )
        os.chmod(path, 0o600)
    monkeypatch.setenv(signing.ENV_VAR, str(path))
    workspace.create()
    with pytest.raises(BadInputError, match=message) as caught:
        signing.private_key(workspace)
    assert f"${signing.ENV_VAR}" in str(caught.value)
    assert not (workspace.root / "signing.key").exists()  # no workspace key made instead
    assert main(["verify", "--public-key", "--workspace", str(workspace.root)]) == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_environment_key_is_refused(workspace, tmp_path, monkeypatch):
    path = write_key(tmp_path / "key.pem", Ed25519PrivateKey.generate(), 0o000)
    monkeypatch.setenv(signing.ENV_VAR, str(path))
    with pytest.raises(BadInputError, match="cannot be read"):
        signing.private_key(workspace)
