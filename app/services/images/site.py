"""The site's registries, [images] in its site file:

    [images]
    mirror = "mirror.example.org:5000"   # names without a registry come from here
    registries = ["nvcr.io", "registry.example.org"]   # others runs may name
    insecure = ["10.77.0.1:5000"]        # plain HTTP (a dev registry), never on a site
    [images.logins]
    "registry.example.org" = "EXAMPLE"   # private: each org's secrets
                                         # EXAMPLE_USERNAME and EXAMPLE_PASSWORD

Without it, names without a registry come from Docker Hub and no other
registry may be named. The nodes list the same registries for their pull
helper (IMAGE_REGISTRIES in divergent-node.conf)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from divergent.app.services.images.refs import DOCKER_HUB, REGISTRY

SECRET_PREFIX = re.compile(r"[A-Z][A-Z0-9_]{0,40}")
KEYS = ("mirror", "registries", "insecure", "logins")


class ImageSettingsError(ValueError):
    """Says which [images] value is wrong."""


@dataclass(frozen=True)
class ImageSettings:
    mirror: str = DOCKER_HUB
    registries: tuple[str, ...] = ()
    insecure: tuple[str, ...] = ()
    # Registry -> the prefix of the org secrets that hold its login.
    logins: dict[str, str] = field(default_factory=dict)

    def allowed(self, registry: str) -> bool:
        return registry in (self.mirror, *self.registries, *self.logins)

    def scheme(self, registry: str) -> str:
        return "http" if registry in self.insecure else "https"


def _registry(value: object, where: str) -> str:
    if not isinstance(value, str) or not REGISTRY.fullmatch(value):
        raise ImageSettingsError(f"[images] {where}: {value!r} is not a registry's host[:port]")
    return value


def _registries(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ImageSettingsError(f"[images] {where}: a list of host[:port]")
    return tuple(_registry(item, where) for item in value)


def image_settings(table: object) -> ImageSettings:
    if not isinstance(table, dict):
        raise ImageSettingsError("[images] must be a table")
    unknown = set(table) - set(KEYS)
    if unknown:
        raise ImageSettingsError(f"[images]: unknown settings {', '.join(sorted(unknown))}")
    logins = table.get("logins", {})
    if not isinstance(logins, dict):
        raise ImageSettingsError("[images.logins]: a table of registry = \"SECRET_PREFIX\"")
    for registry, prefix in logins.items():
        _registry(registry, "logins")
        if not isinstance(prefix, str) or not SECRET_PREFIX.fullmatch(prefix):
            raise ImageSettingsError(f"[images.logins] {registry}: {prefix!r} is not a secret "
                                     "name's prefix (A-Z, digits, _)")
    return ImageSettings(mirror=_registry(table.get("mirror", DOCKER_HUB), "mirror"),
                         registries=_registries(table.get("registries", []), "registries"),
                         insecure=_registries(table.get("insecure", []), "insecure"),
                         logins=dict(logins))
