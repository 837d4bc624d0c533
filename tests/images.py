"""Images a test makes itself and pushes to the dev registry (Docker's
Registry HTTP API v2, as skopeo pushes): one layer of the files it names,
so an attack's image is a few lines of the test that uses it; and the
digest the registry serves for a name."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import requests

# Where tests push (slurm/dev/containers): the same storage the nodes pull from.
PUSH = "127.0.0.1:5000"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, str | bytes]) -> bytes:
    """A tar of `files`: path -> content, or "->target" for a link."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            if isinstance(content, str) and content.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:]
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _upload(repository: str, blob: bytes) -> None:
    started = requests.post(f"http://{PUSH}/v2/{repository}/blobs/uploads/", timeout=30)
    started.raise_for_status()
    location = started.headers["Location"]
    if location.startswith("/"):
        location = f"http://{PUSH}{location}"
    joiner = "&" if "?" in location else "?"
    requests.put(f"{location}{joiner}digest={_digest(blob)}", data=blob,
                 headers={"Content-Type": "application/octet-stream"},
                 timeout=30).raise_for_status()


def push_image(repository: str, tag: str, files: dict[str, str | bytes],
               config: dict | None = None) -> None:
    """An image of one layer holding `files` (and Docker's `config`: Volumes,
    Env...), as REGISTRY/repository:tag."""
    tar = _layer(files)
    layer = gzip.compress(tar, mtime=0)
    config_blob = json.dumps({"architecture": "amd64", "os": "linux", "config": config or {},
                              "rootfs": {"type": "layers", "diff_ids": [_digest(tar)]}}).encode()
    _upload(repository, layer)
    _upload(repository, config_blob)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "size": len(config_blob), "digest": _digest(config_blob)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer), "digest": _digest(layer)}]}).encode()
    requests.put(f"http://{PUSH}/v2/{repository}/manifests/{tag}", data=manifest,
                 headers={"Content-Type": MANIFEST}, timeout=30).raise_for_status()


def manifest_digest(image: str) -> str:
    """sha256:… of the manifest the dev registry serves for REGISTRY/repo:tag."""
    registry, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    answer = requests.head(f"http://{registry}/v2/{repository}/manifests/{tag}", timeout=10,
                           headers={"Accept": MANIFEST})
    answer.raise_for_status()
    return answer.headers["Docker-Content-Digest"]
