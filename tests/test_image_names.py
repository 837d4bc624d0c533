"""Image names as Docker reads them, the site's [images] table, and names
resolved to a digest by the dev registry (a real one: slurm/dev/containers),
logins included."""
from __future__ import annotations

import pytest

from divergent.app.services.images.refs import DOCKER_HUB, BadImageName, ImageName, parse_image
from divergent.app.services.images.registry import ImageError, Login, RegistryUnreachable, resolve
from divergent.app.services.images.site import ImageSettingsError, image_settings
from tests.conftest import DEV_STATE, PRIVATE_REGISTRY, REGISTRY
from tests.images import manifest_digest

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("name, mirror, parsed", [
    ("pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime", DOCKER_HUB,
     ImageName(DOCKER_HUB, "pytorch/pytorch", "2.14.0-cuda12.6-cudnn9-runtime", None)),
    ("python:3.12", DOCKER_HUB, ImageName(DOCKER_HUB, "library/python", "3.12", None)),
    ("python", "mirror.lab:5000", ImageName("mirror.lab:5000", "library/python", None, None)),
    ("docker.io/nvidia/cuda:12.6", "mirror.lab:5000",
     ImageName(DOCKER_HUB, "nvidia/cuda", "12.6", None)),
    ("10.77.0.1:5000/div/python:3.11", DOCKER_HUB,
     ImageName("10.77.0.1:5000", "div/python", "3.11", None)),
    (f"nvcr.io/nvidia/pytorch@{DIGEST}", DOCKER_HUB,
     ImageName("nvcr.io", "nvidia/pytorch", None, DIGEST)),
    (f"localhost/a/b:t@{DIGEST}", DOCKER_HUB, ImageName("localhost", "a/b", "t", DIGEST)),
])
def test_names_are_read_as_docker_reads_them(name, mirror, parsed):
    assert parse_image(name, mirror) == parsed


@pytest.mark.parametrize("name, says", [
    ("div/../../etc:1", "is not an image name"),
    ("Upper/Case", "is not an image name"),
    ("reg.io/a:$(id)", "is not a tag"),
    ("a@sha256:short", "a digest is sha256: and 64 hex digits"),
    ("reg_io.x:80/a", "is not a registry's host[:port]"),
    ("bad-.host:5000/a", "is not a registry's host[:port]"),
    ("a/b c", "is not an image name"),
    ("foo:bar:baz", "'foo:bar' is not an image name"),       # the name as given, no library/
])
def test_names_outside_the_grammar_are_refused_with_what_is_wrong(name, says):
    with pytest.raises(BadImageName) as refused:
        parse_image(name)
    assert says in str(refused.value)


def test_the_sites_images_table_is_checked_whole():
    settings = image_settings({"mirror": "mirror.lab:5000", "registries": ["nvcr.io"],
                               "insecure": ["mirror.lab:5000"],
                               "logins": {"nvcr.io": "NGC"}})
    assert settings.allowed("nvcr.io") and settings.allowed("mirror.lab:5000")
    assert not settings.allowed("evil.io")
    assert settings.scheme("mirror.lab:5000") == "http" and settings.scheme("nvcr.io") == "https"
    for table, says in (({"mirrors": "x"}, "unknown settings mirrors"),
                        ({"logins": {"nvcr.io": "ngc; rm"}}, "is not a secret name's prefix"),
                        ({"registries": ["http://x"]}, "registries")):
        with pytest.raises(ImageSettingsError) as refused:
            image_settings(table)
        assert says in str(refused.value)


def test_a_name_resolves_to_the_digest_its_registry_serves(slurm_cluster):
    image = parse_image(f"{REGISTRY}/div/python:3.11")
    resolved = resolve(image, "http", None, "div/python:3.11")
    assert resolved.digest == manifest_digest(f"{REGISTRY}/div/python:3.11")
    assert 20_000_000 < resolved.size < 200_000_000          # its layers, compressed
    with pytest.raises(ImageError) as missing:
        resolve(parse_image(f"{REGISTRY}/div/nothing:1"), "http", None, "div/nothing:1")
    assert str(missing.value) == f"div/nothing:1: no such image in {REGISTRY}"
    with pytest.raises(RegistryUnreachable):
        resolve(parse_image("10.77.0.1:1/a:1"), "http", None, "a:1")


def test_a_private_registry_takes_its_login_and_refuses_a_wrong_one(slurm_cluster):
    user, password = (DEV_STATE / "registry-private.login").read_text().strip().split(":", 1)
    image = parse_image(f"{PRIVATE_REGISTRY}/div/python:3.11")
    resolved = resolve(image, "http", Login(user, password), "private")
    assert resolved.digest == manifest_digest(f"{REGISTRY}/div/python:3.11")
    for login in (None, Login(user, "wrong")):
        with pytest.raises(ImageError) as refused:
            resolve(image, "http", login, "private")
        assert PRIVATE_REGISTRY in str(refused.value)
