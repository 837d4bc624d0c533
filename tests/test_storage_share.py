"""The storage service on a real, small filesystem: a full share is a clear
error that loses nothing already stored; downloads and deletes never go
through a symlink a run swaps in after the check; a folder the server may
not write is a 503 that says so."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from divergent.app.extensions import db
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.errors import Invalid, NotFound, Unavailable
from divergent.app.services.files import storage
from divergent.app.services.files.storage import ShareFull, clean_path, store_file
from divergent.app.services.files.volumes import ensure_volume


@pytest.fixture
def small_share(tmp_path, app_config, request):
    """A 2 MiB tmpfs as the data folder (the tests run as root), and the app
    on it, in its context."""
    share = tmp_path / "share"
    share.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(share)], check=True)
    app_config["DIV_DATA_DIR"] = str(share)
    request.getfixturevalue("app_context")
    yield share
    subprocess.run(["umount", str(share)], check=False)   # a test may have done it


def _put(org, path: str, data: bytes) -> None:
    store_file(org, "vol", path, io.BytesIO(data), len(data), hashlib.sha256(data).hexdigest())


def test_a_full_share_refuses_the_file_and_keeps_what_was_stored(small_share):
    org = get_or_create_org("acme")
    ensure_volume(org, "vol")
    kept = os.urandom(500_000)
    _put(org, "kept.bin", kept)
    _put(org, "kept.bin", kept)   # replacing with the same bytes works too
    with pytest.raises(ShareFull, match="the share is full.*nothing already stored was lost"):
        _put(org, "kept.bin", os.urandom(3_000_000))
    assert (small_share / "share/acme/vol/kept.bin").read_bytes() == kept
    assert os.listdir(small_share / "share/acme/vol") == ["kept.bin"]   # no half file, no temp


@pytest.fixture(params=["unnamed", "uploads-folder"])
def either_way_of_writing(request, monkeypatch):
    """Uploads are written as unnamed files in their folder (O_TMPFILE), or,
    on a share without O_TMPFILE (NFS), in .uploads and renamed: both."""
    if request.param == "uploads-folder":
        monkeypatch.setattr(storage, "_open_unnamed", lambda parent: None)
    return request.param


def test_an_upload_replaces_a_file_or_a_link_a_run_left_never_its_target(
        small_share, tmp_path, either_way_of_writing):
    org = get_or_create_org("acme")
    root = Path(ensure_volume(org, "vol"))
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"the host's")
    (root / "out.txt").symlink_to(outside)                # what a run can make
    _put(org, "out.txt", b"uploaded")
    _put(org, "new.txt", b"first")
    _put(org, "new.txt", b"second")                       # an existing file, replaced whole
    assert outside.read_bytes() == b"the host's"
    assert not (root / "out.txt").is_symlink() and (root / "out.txt").read_bytes() == b"uploaded"
    assert (root / "new.txt").read_bytes() == b"second"
    assert sorted(os.listdir(root)) == ["new.txt", "out.txt"]   # no temporary names left
    with pytest.raises(Invalid, match="do not match"):    # a wrong hash leaves nothing either way
        store_file(org, "vol", "bad.txt", io.BytesIO(b"abc"), 3, hashlib.sha256(b"x").hexdigest())
    assert sorted(os.listdir(root)) == ["new.txt", "out.txt"]
    uploads = Path(storage.uploads_dir(org))
    assert list(uploads.iterdir()) == []


def test_parts_left_by_killed_uploads_are_swept(small_share, either_way_of_writing):
    org = get_or_create_org("acme")
    ensure_volume(org, "vol")
    uploads = Path(storage.uploads_dir(org))
    old, fresh = uploads / ".0000000000000000.part", uploads / ".1111111111111111.part"
    for part in (old, fresh):
        part.write_bytes(b"half an upload")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    _put(org, "new.bin", b"new")
    _put(org, "new.bin", b"newer")     # a file replaced goes through .uploads either way
    assert not old.exists() and fresh.exists()              # an upload may still own it


def test_a_part_renamed_into_place_while_the_sweep_looks_is_no_error(small_share, monkeypatch):
    """Uploads share a folder (code blobs: one per two hex digits), so the
    sweep lists parts that other uploads rename into place meanwhile; seen
    as a 500 on `div run`'s upload before."""
    monkeypatch.setattr(storage, "_open_unnamed", lambda parent: None)   # through .uploads
    org = get_or_create_org("acme")
    ensure_volume(org, "vol")
    uploads = Path(storage.uploads_dir(org))
    (uploads / ".2222222222222222.part").write_bytes(b"another upload's")
    listed = os.scandir

    def renamed_as_listed(folder):
        with listed(folder) as entries:
            found = list(entries)
        for entry in found:
            os.unlink(entry.path)               # its upload renamed it into place
        return contextlib.nullcontext(found)
    monkeypatch.setattr(storage.os, "scandir", renamed_as_listed)
    _put(org, "new.bin", b"new")
    assert (small_share / "share/acme/vol/new.bin").read_bytes() == b"new"


def test_a_file_whose_bytes_do_not_match_its_hash_is_not_stored(small_share):
    org = get_or_create_org("acme")
    ensure_volume(org, "vol")
    with pytest.raises(Invalid, match="do not match"):
        store_file(org, "vol", "x", io.BytesIO(b"abc"), 3, hashlib.sha256(b"abd").hexdigest())
    assert not (small_share / "share/acme/vol/x").exists()


@pytest.mark.parametrize("path", ["..", "a/../b", "/abs", "a\0b"])
def test_clean_path_refuses(path):
    with pytest.raises(Invalid):
        clean_path(path)


def test_clean_path_normalises():
    assert clean_path("./a//b/") == "a/b"
    assert clean_path("") == ""
    with pytest.raises(Invalid):
        clean_path("", allow_root=False)


def test_a_share_that_is_gone_is_a_clear_error(small_share):
    org = get_or_create_org("acme")
    ensure_volume(org, "vol")
    _put(org, "kept.bin", b"kept")
    subprocess.run(["umount", str(small_share)], check=True)
    with pytest.raises(Unavailable, match="the share is not available"):
        _put(org, "new.bin", b"new")


@pytest.fixture
def volume_with_links(small_share, tmp_path):
    org = get_or_create_org("acme")
    root = ensure_volume(org, "vol")
    os.makedirs(f"{root}/ckpt")
    with open(f"{root}/ckpt/step-100.bin", "wb") as f:
        f.write(b"weights")
    os.symlink("step-100.bin", f"{root}/ckpt/latest.bin")
    os.mkfifo(f"{root}/ckpt/pipe")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"not yours")
    return org, root, outside


def test_a_download_never_follows_a_link_or_waits_on_a_fifo(volume_with_links):
    org, root, outside = volume_with_links
    file, info, sha = storage.open_for_download(org, "vol", "ckpt/step-100.bin")
    with file:
        assert file.read() == b"weights" and info.st_size == 7
    assert sha == hashlib.sha256(b"weights").hexdigest()   # the client checks what it got
    with pytest.raises(NotFound):                         # a link, even one inside
        storage.open_for_download(org, "vol", "ckpt/latest.bin")
    with pytest.raises(NotFound):                         # a FIFO: refused, not a hang
        storage.open_for_download(org, "vol", "ckpt/pipe")
    os.symlink(str(outside), f"{root}/out")               # what a run can make
    with pytest.raises(Invalid):
        storage.open_for_download(org, "vol", "out/secret.bin")


def test_delete_removes_a_link_itself_and_never_goes_through_one(volume_with_links):
    org, root, outside = volume_with_links
    os.symlink(str(outside), f"{root}/out")
    with pytest.raises(Invalid):
        storage.delete(org, "vol", "out/secret.bin")
    assert (outside / "secret.bin").read_bytes() == b"not yours"
    storage.delete(org, "vol", "ckpt/latest.bin")
    storage.delete(org, "vol", "out")                     # a link out can be cleaned up
    assert not os.path.lexists(f"{root}/ckpt/latest.bin") and not os.path.lexists(f"{root}/out")
    assert os.path.exists(f"{root}/ckpt/step-100.bin") and (outside / "secret.bin").exists()


def test_listings_show_files_and_folders_only_and_never_go_through_a_link(volume_with_links):
    org, root, outside = volume_with_links
    os.symlink(str(outside), f"{root}/out")
    _, entries = storage.list_path(org, "vol", "ckpt")
    assert [e.path for e in entries] == ["ckpt/step-100.bin"]
    _, everything = storage.list_path(org, "vol", "", recursive=True)
    assert [e.path for e in everything] == ["ckpt/step-100.bin"]
    with pytest.raises(Invalid):
        storage.list_path(org, "vol", "out")
    with pytest.raises(Invalid):
        storage.list_path(org, "vol", "out/secret.bin")


def test_a_share_folder_the_server_may_not_write_is_a_503_that_says_so(app, tmp_path):
    with app.app_context():
        key = create_key(get_or_create_user(get_or_create_org("acme"), "alice"))
        share = tmp_path / "data" / "share" / "acme"
        share.mkdir(parents=True)
        # As root, only an immutable folder refuses: the service user meets a root-owned one.
        subprocess.run(["chattr", "+i", str(share)], check=True)
        try:
            answer = app.test_client().post("/api/v1/volumes/vol/plan", json={"files": []},
                                            headers={"Authorization": f"Bearer {key}"})
        finally:
            subprocess.run(["chattr", "-i", str(share)], check=True)
        assert answer.status_code == 503, answer.get_data(as_text=True)
        assert "the share refused the server (permission denied)" in answer.get_json()["error"]
        db.session.remove()


def _bundle(files: dict[str, bytes], hashes: dict[str, str] | None = None,
            global_header: str | None = None, own_headers: bool = False) -> bytes:
    """A bundle as the CLI sends it (every hash in one global header), or as
    CLIs before it did (a DIV.sha256 header a member)."""
    import tarfile
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()} \
        if hashes is None else hashes
    headers = {} if own_headers else {"DIV.sha256s": global_header or json.dumps(hashes)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers=headers) as bundle:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if own_headers:
                info.pax_headers = {"DIV.sha256": hashes[name]}
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _store(org, data: bytes) -> int:
    return storage.store_bundle(org, "vol", io.BytesIO(data), len(data))


def test_a_bundle_carries_its_hashes_in_one_header_or_one_a_member(small_share):
    org = get_or_create_org("acme")
    root = Path(ensure_volume(org, "vol"))
    files = {"a/one.txt": b"one", "a/two.txt": b"two", "three.txt": b"three"}
    assert _store(org, _bundle(files)) == 3
    assert _store(org, _bundle({"old/cli.txt": b"as before"}, own_headers=True)) == 1
    assert (root / "a/two.txt").read_bytes() == b"two"
    assert (root / "old/cli.txt").read_bytes() == b"as before"


@pytest.mark.parametrize("header", ["not json", "[1, 2]", '"a string"'])
def test_a_bundle_whose_hash_header_is_not_an_object_is_refused(small_share, header):
    org = get_or_create_org("acme")
    root = Path(ensure_volume(org, "vol"))
    with pytest.raises(Invalid, match="DIV.sha256s header is a JSON object"):
        _store(org, _bundle({"x.txt": b"x"}, global_header=header))
    assert not (root / "x.txt").exists()


def test_a_bundle_member_without_its_hash_or_with_a_wrong_one_is_not_stored(small_share):
    org = get_or_create_org("acme")
    root = Path(ensure_volume(org, "vol"))
    right = hashlib.sha256(b"ok").hexdigest()
    for hashes in ({"ok.txt": right}, {"ok.txt": right, "bad.txt": right}):
        with pytest.raises(Invalid, match="do not match"):
            _store(org, _bundle({"ok.txt": b"ok", "bad.txt": b"tampered"}, hashes=hashes))
        assert (root / "ok.txt").read_bytes() == b"ok"     # whole files before it stay
        assert not (root / "bad.txt").exists()


def _crafted(kind: str) -> bytes:
    """Bundles an attacker with a member's key could send."""
    import tarfile
    if kind == "nested":
        return _bundle({"x.txt": b"x"}, global_header='{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    if kind == "huge":
        return _bundle({"x.txt": b"x"}, global_header=json.dumps({"p" * 100: "0" * 64} | {
            f"f{i}": "0" * 64 for i in range(120_000)}))
    if kind == "late-header":       # a global header after a member, as two tars joined
        first = _bundle({"early.txt": b"early"}, own_headers=True)
        with tarfile.open(fileobj=io.BytesIO(first)) as parsed:
            member = parsed.next()
        end = member.offset_data + 512              # its 5 bytes, padded: the end-of-tar cut
        later = _bundle({"late.txt": b"late"}, hashes={"late.txt": hashlib.sha256(b"late").hexdigest()})
        return first[:end] + later
    buffer = io.BytesIO()           # a pax header tarfile itself cannot read
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as bundle:
        info = tarfile.TarInfo("sparse.bin")
        info.pax_headers = {"GNU.sparse.map": "1,x", "GNU.sparse.size": "10"}
        bundle.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


@pytest.mark.parametrize("kind, says", [
    ("nested", "JSON object of path: sha256"), ("huge", "at most 8 MiB"),
    ("late-header", "comes before its files"), ("bad-pax", "not a tar bundle")])
def test_a_crafted_bundle_is_a_400_that_stores_nothing_it_cannot_check(small_share, kind, says):
    org = get_or_create_org("acme")
    root = Path(ensure_volume(org, "vol"))
    with pytest.raises(Invalid, match=says):
        _store(org, _crafted(kind))
    assert not (root / "late.txt").exists() and not (root / "x.txt").exists()
