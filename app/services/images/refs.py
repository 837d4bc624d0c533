"""Image names as Docker writes them (`pytorch/pytorch:2.14.0-…`,
`10.77.0.1:5000/div/python:3.11`, `nvcr.io/nvidia/pytorch@sha256:…`), taken
apart by Docker's own grammar: the first part is a registry when it has a
dot or a port or is localhost, else the name is the site's mirror's. Only
these shapes pass: each part reaches a URL, the batch script and the node's
pull helper, which checks them again with the same patterns."""
from __future__ import annotations

import re
from dataclasses import dataclass

# Docker's distribution/reference grammar (lowercase path components with
# single separators: never `..`, so never a path that leaves /v2/<name>/).
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*")
REGISTRY = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
                      r"(?::[0-9]{1,5})?)")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Docker Hub, where names without a registry go unless the site has a mirror.
DOCKER_HUB = "registry-1.docker.io"
_HUB_NAMES = {"docker.io", "index.docker.io", DOCKER_HUB}


class BadImageName(ValueError):
    """Says what is wrong with the name, for the user."""


@dataclass(frozen=True)
class ImageName:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What the registry's manifest URL names: the digest if given."""
        return self.digest or self.tag or "latest"


def parse_image(name: str, mirror: str = DOCKER_HUB) -> ImageName:
    rest, digest = name, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST.fullmatch(digest):
            raise BadImageName(f"{name}: a digest is sha256: and 64 hex digits")
    first, slash, remainder = rest.partition("/")
    named = bool(slash) and ("." in first or ":" in first or first == "localhost")
    registry, path = (first.lower(), remainder) if named else (mirror, rest)
    tag = None
    # A colon after the last slash starts the tag (one before it is a port).
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
        if not TAG.fullmatch(tag):
            raise BadImageName(f"{name}: {tag!r} is not a tag (letters, digits, _ . -)")
    if registry in _HUB_NAMES:
        registry = DOCKER_HUB
    if not REGISTRY.fullmatch(registry):
        raise BadImageName(f"{name}: {registry!r} is not a registry's host[:port]")
    if not REPOSITORY.fullmatch(path):
        raise BadImageName(f"{name}: {path!r} is not an image name (lowercase letters, digits, "
                           "and . _ - / between them)")
    if (registry == DOCKER_HUB or not named) and "/" not in path:
        # Docker Hub's official images (`python`), there and at its mirror.
        path = f"library/{path}"
    return ImageName(registry, path, tag, digest)
