"""The CLI imports nothing of the server's (it talks HTTP only), so it keeps
copies of what it checks before uploading: name patterns, and the cluster's
shape for a server that does not serve its catalog. These tests hold every
copy equal to the server's own, so a change on one side fails here instead
of letting the two disagree."""
from __future__ import annotations

import pytest

from app.services import checks, transfers, volumes
from app.services.catalog import catalog_json
from app.services.keys import create_key
from app.services.orgs import get_or_create_org, get_or_create_user
from cli import flags
from cli.catalog import FALLBACK, shape_of
from slurm import jobspec


@pytest.mark.parametrize("cli_copy, server", [
    (flags.NAME, jobspec.RUN_NAME), (flags.ENV_KEY, jobspec.ENV_KEY),
    (flags.RESERVED_ENV, jobspec.RESERVED_ENV), (flags.VOLUME, jobspec.VOLUME_NAME),
    (flags.IMAGE, jobspec.IMAGE_REF), (flags.CHECK, checks.CHECK), (flags.NUMBER, checks.NUMBER),
    (flags.S3_BUCKET, transfers.BUCKET)])
def test_the_clis_patterns_are_the_servers(cli_copy, server):
    assert cli_copy.pattern == server.pattern


def test_volume_references_in_commands_name_volumes_as_the_cli_does():
    assert flags.VOLUME.pattern.strip("^$") in volumes.MNT_REFERENCE.pattern


def test_the_clis_fallback_shape_is_what_a_default_server_serves(app, client):
    with app.app_context():
        key = create_key(get_or_create_user(get_or_create_org("acme"), "alice"))
        assert shape_of(catalog_json()) == FALLBACK
    served = client.get("/api/v1/catalog", headers={"Authorization": f"Bearer {key}"})
    assert served.status_code == 200
    assert shape_of(served.get_json()) == FALLBACK
    prices = {row["name"]: row["price_per_hour"] for row in served.get_json()["gpu_types"]}
    assert prices == {"b300": "8.30", "h200": "5.45", "h100": "4.80", "l40s": "2.55",
                      "cpu": "0.30"}
    assert client.get("/api/v1/catalog").status_code == 401


def test_a_site_with_other_nodes_serves_their_shape(app, client, tmp_path):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    (tmp_path / "site.toml").write_text("[slurm]\ngpus_per_node = 4\n")
    with app.app_context():
        key = create_key(get_or_create_user(get_or_create_org("acme"), "alice"))
    served = client.get("/api/v1/catalog", headers={"Authorization": f"Bearer {key}"})
    assert shape_of(served.get_json()).types["h100"].per_node == 4
