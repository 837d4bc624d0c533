"""`/api/v1/openapi.json` is the API: every route has its entry and every
entry its route, and schemathesis, fuzzing the real server from the
description, finds no 500 and no answer the description does not allow."""
from __future__ import annotations

import re
import subprocess

import requests

from divergent.app.api.openapi import document
from tests.stack import VENV_BIN

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")


def test_every_route_is_described_and_every_description_routed(app):
    routes = {(method.lower(), re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule.removeprefix("/api/v1")))
              for rule in app.url_map.iter_rules() if rule.rule.startswith("/api/v1/")
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    described = {(method, path) for path, operations in document()["paths"].items()
                 for method in operations}
    assert described == routes


def test_the_description_is_open_and_valid_openapi(client):
    import schemathesis
    answer = client.get("/api/v1/openapi.json")
    assert answer.status_code == 200
    schema = schemathesis.openapi.from_dict(answer.get_json())
    assert len(list(schema.get_all_operations())) == sum(
        len(operations) for operations in document()["paths"].values())


def test_schemathesis_finds_no_error_and_no_answer_outside_the_description(stack, tmp_path):
    # An org whose limit is $0: what the fuzzer sends may be a valid run,
    # but none is ever submitted.
    key = stack.add_org("fuzz")
    stack.flask("org-limit", "fuzz", "0")
    url = f"{stack.url}/api/v1/openapi.json"
    assert requests.get(url, timeout=10).status_code == 200
    done = subprocess.run(
        [str(VENV_BIN / "schemathesis"), "run", url, "-H", f"Authorization: Bearer {key}",
         "-c", CHECKS, "--max-examples", "25", "--seed", "20", "--report", "junit",
         "--report-dir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    tally = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert done.returncode == 0 and tally, done.stdout[-6000:]
    assert int(tally.group(1)) == int(tally.group(2)) > 1000
    assert "Traceback" not in stack.server_log.read_text()
