"""Content-addressed code upload: manifests are checked path by path, blobs
by hash, and a tree is laid out once under <volume>/code/<hash8>."""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from divergent.app.services.accounts.orgs import get_or_create_org
from divergent.app.services.errors import Invalid
from divergent.app.services.files.code import (
    MissingBlobs,
    lay_out_tree,
    parse_manifest,
    store_blob,
    stored_tree,
    tree_hash,
)


def entry(path, data=b"x", executable=False):
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "executable": executable}


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a",
                                  "a/./b", "", "a\0b", "a\\b", "a/"])
def test_paths_that_leave_the_tree_are_refused(path):
    with pytest.raises(Invalid):
        parse_manifest([entry(path)])


def test_other_bad_manifests_are_refused():
    for files in ([], "x", [entry("a"), entry("a")], [entry("a"), entry("a/b")],
                  [dict(entry("a"), sha256="XYZ")], [dict(entry("a"), size=-1)],
                  [dict(entry("a"), size=257_000_000)]):
        with pytest.raises(Invalid):
            parse_manifest(files)


def test_the_tree_hash_changes_with_content_mode_and_path():
    base = tree_hash(parse_manifest([entry("a.py")]))
    assert base == tree_hash(parse_manifest([entry("a.py")]))
    assert base != tree_hash(parse_manifest([entry("a.py", b"y")]))
    assert base != tree_hash(parse_manifest([entry("a.py", executable=True)]))
    assert base != tree_hash(parse_manifest([entry("b.py")]))


@pytest.fixture
def org(app_context):
    return get_or_create_org("acme")


def test_blobs_are_checked_and_trees_laid_out_once(org, tmp_path):
    entries = parse_manifest([entry("run.sh", b"echo hi\n", executable=True),
                              entry("pkg/a.py", b"A = 1\n")])
    with pytest.raises(MissingBlobs) as missing:
        lay_out_tree(org, "acme-code", entries)
    assert len(missing.value.missing) == 2
    with pytest.raises(Invalid):
        store_blob(org, hashlib.sha256(b"echo hi\n").hexdigest(), io.BytesIO(b"tampered"), 8)
    for data in (b"echo hi\n", b"A = 1\n"):
        store_blob(org, hashlib.sha256(data).hexdigest(), io.BytesIO(data), len(data))
    tree = lay_out_tree(org, "acme-code", entries)
    assert tree.ref == f"acme-code/code/{tree_hash(entries)[:8]}"
    assert (tree.files, tree.bytes) == (2, 14)
    root = tmp_path / "data" / "share" / "acme" / "acme-code" / "code" / tree_hash(entries)[:8]
    assert (root / "pkg" / "a.py").read_bytes() == b"A = 1\n"
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o755
    assert not list(root.parent.glob(".tmp-*"))
    assert lay_out_tree(org, "acme-code", entries) == tree
    assert stored_tree(org, tree.ref) == tree.path == str(
        tmp_path / "data" / "trees" / "acme" / "acme-code" / tree_hash(entries)[:8])
    assert stored_tree(org, "acme-code/code/cafebabe") is None

def test_a_code_folder_turned_into_a_link_leads_nowhere(org, tmp_path):
    entries = parse_manifest([entry("a.py", b"A")])
    store_blob(org, hashlib.sha256(b"A").hexdigest(), io.BytesIO(b"A"), 1)
    volume = tmp_path / "data" / "share" / "acme" / "acme-code"
    volume.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (volume / "code").symlink_to(outside)
    tree = lay_out_tree(org, "acme-code", entries)
    assert list(outside.iterdir()) == []                  # no browse copy through the link
    assert stored_tree(org, tree.ref) == tree.path        # runs get the server's own tree
    assert (Path(tree.path) / "a.py").read_bytes() == b"A"
