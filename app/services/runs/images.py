"""A run's image, resolved when the run is checked and again when it is
made (runtime pyxis alone): its name as the site reads it, its registry one
the site lists, the org's login where that registry takes one, and the
digest and size its registry gives. Any of them wrong is one clear answer
before anything is uploaded or submitted."""
from __future__ import annotations

import re
from dataclasses import dataclass

from divergent.app.models import Org
from divergent.app.services.accounts.secrets import values_for_run, write_private_file
from divergent.app.services.errors import Invalid, NotFound, Unavailable
from divergent.app.services.images.refs import BadImageName, parse_image
from divergent.app.services.images.registry import ImageError, Login, RegistryUnreachable, resolve
from divergent.app.services.images.site import ImageSettings
from divergent.app.services.site.slurm_access import current_site
from divergent.slurm.script import REGISTRY_LOGIN_FILE

# A login reaches enroot as a netrc line (machine, login, password, split
# at white space), and enroot runs a password that starts with $ through a
# shell outside the sandbox: only characters that are none of that.
LOGIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
LOGIN_PASSWORD = re.compile(r"[A-Za-z0-9._~+/=:@!%^*-]{1,4096}")


@dataclass(frozen=True)
class RunImage:
    source: str          # REGISTRY#REPOSITORY@sha256:HEX, for the nodes
    size: int
    login: str | None    # netrc text for the nodes' pull of a private image


def run_image(org: Org, name: str) -> RunImage | None:
    """The run's image as the nodes pull it; None where runs use no
    images (runtime none, or apptainer, which pulls by name itself)."""
    site = current_site()
    if site.slurm.runtime != "pyxis":
        return None
    settings = site.images
    try:
        image = parse_image(name, settings.mirror)
    except BadImageName as exc:
        raise Invalid(f"image {exc}") from None
    if not settings.allowed(image.registry):
        raise Invalid(f"image {name}: {image.registry} is not one of this site's registries "
                      f"({', '.join(_listed(settings))})")
    login = _login(org, settings, image.registry)
    try:
        resolved = resolve(image, settings.scheme(image.registry), login, name)
    except RegistryUnreachable as exc:
        raise Unavailable(f"image {exc}") from None
    except ImageError as exc:
        raise Invalid(f"image {exc}") from None
    netrc = None
    if login is not None:
        # enroot looks a login up by the registry's host, without its port.
        netrc = (f"machine {image.registry.rsplit(':', 1)[0]} login {login.username} "
                 f"password {login.password}\n")
    return RunImage(f"{image.registry}#{image.repository}@{resolved.digest}", resolved.size,
                    netrc)


def _listed(settings: ImageSettings) -> list[str]:
    return list(dict.fromkeys((settings.mirror, *settings.registries, *settings.logins)))


def _login(org: Org, settings: ImageSettings, registry: str) -> Login | None:
    prefix = settings.logins.get(registry)
    if prefix is None:
        return None
    names = (f"{prefix}_USERNAME", f"{prefix}_PASSWORD")
    try:
        username, password = values_for_run(org, list(names)).values()
    except NotFound:
        raise Invalid(f"{registry} takes a login: set the org's secrets {names[0]} and "
                      f"{names[1]} (div secrets set)") from None
    if not LOGIN_NAME.fullmatch(username) or not LOGIN_PASSWORD.fullmatch(password):
        raise Invalid(f"the secrets {names[0]} and {names[1]} hold no login divergent can "
                      "pass on: letters, digits and . _ ~ + / = : @ ! % ^ * - alone")
    return Login(username, password)


def write_registry_login(state_dir: str, image: RunImage | None) -> None:
    if image is not None and image.login is not None:
        write_private_file(state_dir, REGISTRY_LOGIN_FILE, image.login)
