"""Asks an image's registry for its manifest (Docker's Registry HTTP API
v2, as enroot and Docker ask), before the run is submitted: the digest the
nodes cache it by, its size for the pull line, and at once a clear answer
when it does not exist or the org's login is refused, never a job that fails
on its node.

Only registries the site lists are asked (the caller checks), within
DEADLINE seconds in all, without redirects, proxies or the server's own
netrc, and a manifest read up to MAX_MANIFEST bytes: a run's image name
never makes the server fetch anything else, or much, or for long."""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass

import requests

from divergent.app.services.images.refs import DIGEST, ImageName

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT = ", ".join((MANIFEST, OCI_MANIFEST, MANIFEST_LIST, OCI_INDEX))
# The nodes' platform: the entry of a multi-platform image they run.
PLATFORM = ("linux", "amd64")
MAX_MANIFEST = 4 << 20
TIMEOUT = (3, 10)
DEADLINE = 20
# A name resolved a moment ago is the same image (a sweep, a test's runs).
CACHE_SECONDS = 30
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class ImageError(Exception):
    """Why the image cannot be run, for the user."""


class RegistryUnreachable(ImageError):
    """The registry did not answer: the site's trouble, for now."""


@dataclass(frozen=True)
class Login:
    username: str
    password: str


@dataclass(frozen=True)
class Resolved:
    digest: str          # sha256:… of the platform's manifest
    size: int            # its layers, compressed, as pulled


_cache: dict[tuple, tuple[float, Resolved]] = {}


def resolve(image: ImageName, scheme: str, login: Login | None, shown: str) -> Resolved:
    key = (image, scheme, login)
    hit = _cache.get(key)
    if hit and hit[0] > time.monotonic():
        return hit[1]
    with requests.Session() as session:
        session.trust_env = False
        session.headers["Accept"] = ACCEPT
        deadline = time.monotonic() + DEADLINE
        base = f"{scheme}://{image.registry}/v2/{image.repository}/manifests/"
        body, media, digest = _manifest(session, base + image.reference, image, login, shown,
                                        deadline)
        if image.digest and digest != image.digest:
            raise ImageError(f"{shown}: the registry's manifest is not {image.digest}")
        if media in (MANIFEST_LIST, OCI_INDEX):
            digest = _platform_entry(body, shown)
            body, media, _ = _manifest(session, base + digest, image, login, shown, deadline)
    layers = body.get("layers") if isinstance(body, dict) else None
    if not isinstance(layers, list):
        raise ImageError(f"{shown}: the registry's manifest lists no layers")
    sizes = [layer.get("size", 0) for layer in layers if isinstance(layer, dict)]
    if not all(isinstance(size, int) and size >= 0 for size in sizes):
        raise ImageError(f"{shown}: the registry's manifest gives a layer no size")
    resolved = Resolved(digest, sum(sizes))
    if len(_cache) > 256:
        _cache.clear()
    _cache[key] = (time.monotonic() + CACHE_SECONDS, resolved)
    return resolved


def _manifest(session: requests.Session, url: str, image: ImageName, login: Login | None,
              shown: str, deadline: float) -> tuple[dict, str, str]:
    """The manifest at `url` (its JSON, media type and digest), logging in
    first when the registry asks (a bearer token, or basic)."""
    response = _get(session, url, shown)
    if response.status_code == 401:
        _authorize(session, response.headers.get("WWW-Authenticate", ""), image, login, shown,
                   deadline)
        response = _get(session, url, shown)
    if response.status_code == 401:
        raise ImageError(f"{shown}: {image.registry} refused "
                         + ("the org's login" if login else "to serve it without a login"))
    if response.status_code == 404:
        raise ImageError(f"{shown}: no such image in {image.registry}")
    if response.status_code != 200:
        raise ImageError(f"{shown}: {image.registry} answered {response.status_code}")
    raw = _body(response, shown, deadline)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ImageError(f"{shown}: the registry's manifest is not JSON") from None
    media = response.headers.get("Content-Type", "").split(";")[0].strip() or str(
        body.get("mediaType", "") if isinstance(body, dict) else "")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    return (body if isinstance(body, dict) else {}), media, digest


def _get(session: requests.Session, url: str, shown: str, **kwargs) -> requests.Response:
    try:
        return session.get(url, timeout=TIMEOUT, allow_redirects=False, stream=True, **kwargs)
    except requests.RequestException as exc:
        raise RegistryUnreachable(f"{shown}: the registry did not answer "
                                  f"({type(exc).__name__})") from None


def _body(response: requests.Response, shown: str, deadline: float) -> bytes:
    """The answer's body, up to MAX_MANIFEST bytes, by `deadline` (monotonic)."""
    data = b""
    try:
        for chunk in response.iter_content(65536):
            data += chunk
            if len(data) > MAX_MANIFEST:
                raise ImageError(f"{shown}: the registry's answer is over {MAX_MANIFEST} bytes")
            if time.monotonic() > deadline:
                raise RegistryUnreachable(f"{shown}: the registry took over {DEADLINE} s")
    except requests.RequestException as exc:
        raise RegistryUnreachable(f"{shown}: the registry did not answer "
                                  f"({type(exc).__name__})") from None
    return data


def _authorize(session: requests.Session, challenge: str, image: ImageName,
               login: Login | None, shown: str, deadline: float) -> None:
    scheme, _, params = challenge.partition(" ")
    basic = (login.username, login.password) if login else None
    if scheme.lower() == "basic":
        session.auth = basic
        return
    if scheme.lower() != "bearer":
        raise ImageError(f"{shown}: {image.registry} asks for a login divergent does not speak")
    values = dict(_CHALLENGE.findall(params))
    realm = values.get("realm", "")
    # The token service the registry names, over HTTPS (or the registry's own scheme).
    if not realm.startswith(("https://", f"http://{image.registry}/")):
        raise ImageError(f"{shown}: {image.registry} names a token service divergent will not ask")
    query = {"service": values.get("service", ""),
             "scope": f"repository:{image.repository}:pull"}
    response = _get(session, realm, shown, params=query, auth=basic)
    if response.status_code != 200:
        raise ImageError(f"{shown}: {image.registry} refused "
                         + ("the org's login" if login else "an anonymous pull"))
    try:
        answer = json.loads(_body(response, shown, deadline))
        token = answer.get("token") or answer.get("access_token")
    except (ValueError, AttributeError, RecursionError):
        token = None
    if not isinstance(token, str) or not token:
        raise ImageError(f"{shown}: {image.registry}'s token service gave no token")
    session.headers["Authorization"] = f"Bearer {token}"


def _platform_entry(index: dict, shown: str) -> str:
    for entry in index.get("manifests", []) or []:
        platform = entry.get("platform", {}) if isinstance(entry, dict) else {}
        if (platform.get("os"), platform.get("architecture")) == PLATFORM:
            digest = entry.get("digest", "")
            if isinstance(digest, str) and DIGEST.fullmatch(digest):
                return digest
    raise ImageError(f"{shown}: no {'/'.join(PLATFORM)} image in it")
