"""The catalog a server serves (GET /catalog): a default server serves the
docs' table, which the CLI also stands in with for a server that does not
answer (both built from divergent.terms); a site with other nodes serves
their shape."""
from __future__ import annotations

from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.money.catalog import catalog_json
from divergent.cli.catalog import FALLBACK, shape_of


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
