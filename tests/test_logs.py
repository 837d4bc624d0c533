"""The log stream's events: byte offsets, UTF-8 cut only between characters,
other bytes as base64, following until the run ends, resuming from offsets."""
from __future__ import annotations

import base64
import json
import os

from divergent.app.extensions import db
from divergent.app.models import Project, Run
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.secrets import seal
from divergent.app.services.files.volumes import run_dir
from divergent.app.services.runs.logs import chunk_event, log_events, read_new, utf8_prefix, waiting_in_place


def test_a_character_cut_in_half_waits_for_its_other_half():
    text = "naïve ✓ 🚀".encode()
    for cut in range(len(text) + 1):
        kept = utf8_prefix(text[:cut])
        text[:kept].decode("utf-8")   # never raises
        assert cut - kept < 4


def test_valid_utf8_is_text_and_anything_else_is_base64():
    assert chunk_event("stdout", 7, "✓\n".encode()) == {"stream": "stdout", "offset": 7,
                                                        "data": "✓\n"}
    event = chunk_event("stderr", 0, b"\xff\xfe\x00")
    assert base64.b64decode(event["b64"]) == b"\xff\xfe\x00"


def test_read_new_holds_back_a_half_character_until_the_end(tmp_path):
    path = tmp_path / "stdout"
    path.write_bytes("ok ✓".encode()[:-1])
    assert read_new(str(path), 0, final=False) == b"ok "
    assert read_new(str(path), 0, final=True) == "ok ✓".encode()[:-1]
    assert read_new(str(tmp_path / "missing"), 0, final=False) == b""


def _collect(state, offsets, follow, ended_after=0):
    polls = {"n": 0}

    def poll_run():
        polls["n"] += 1
        return polls["n"] > ended_after, {"event": "status", "status": "running", "waiting": None}

    return list(waiting_in_place(log_events(str(state), offsets, follow, poll_run,
                                            lambda: {"event": "end"})))


def test_events_carry_offsets_and_resume_where_asked(tmp_path):
    (tmp_path / "stdout").write_bytes(b"a" * 300_000)
    (tmp_path / "stderr").write_bytes(b"err\n")
    events = _collect(tmp_path, {}, follow=False)
    out = [e for e in events if e.get("stream") == "stdout"]
    assert [e["offset"] for e in out] == [0, 256 * 1024]
    assert "".join(e["data"] for e in out) == "a" * 300_000
    assert events[-1] == {"event": "end"}
    resumed = _collect(tmp_path, {"stdout": 299_990, "stderr": 4}, follow=False)
    assert resumed[0] == {"stream": "stdout", "offset": 299_990, "data": "a" * 10}
    assert [e for e in resumed if e.get("stream") == "stderr"] == []


def test_follow_sends_status_then_what_was_written_then_the_end(tmp_path):
    (tmp_path / "stdout").write_bytes(b"line\n")
    events = _collect(tmp_path, {}, follow=True, ended_after=1)
    assert events[0]["data"] == "line\n"
    assert events[1]["event"] == "status"
    assert events[-1] == {"event": "end"}


def test_the_apis_log_stream_sends_both_streams_masked_from_the_offsets_asked_then_the_end(
        app, client):
    with app.app_context():
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "alice")
        key = create_key(user)
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id, name="run-done",
                           status="succeeded", gpu_type="cpu", gpus=1, cpus=1, memory_gib=2,
                           image="img", command="true", rate_micros_per_hour=300_000,
                           secrets_sealed=seal(json.dumps({"TOKEN": "hunter2-secret"}))))
        db.session.commit()
        state = run_dir(org, "run-done")
        os.makedirs(state)
        with open(os.path.join(state, "stdout"), "w") as f:
            f.write("first\ntoken=hunter2-secret\n")
        with open(os.path.join(state, "stderr"), "w") as f:
            f.write("warned\n")
    headers = {"Authorization": f"Bearer {key}"}
    answer = client.get("/api/v1/runs/run-done/logs?follow=1&stdout=6", headers=headers)
    events = [json.loads(line) for line in answer.get_data(as_text=True).splitlines()]
    chunks = {e["stream"]: (e["offset"], e["data"]) for e in events if "stream" in e}
    assert chunks == {"stdout": (6, "token=***\n"), "stderr": (0, "warned\n")}
    assert events[-1]["event"] == "end" and events[-1]["run"]["status"] == "succeeded"
    assert client.get("/api/v1/runs/run-done/logs").status_code == 401
    # An offset past anything a filesystem holds reads nothing, never a 500.
    far = client.get("/api/v1/runs/run-done/logs?stdout=100000000000000", headers=headers)
    events = [json.loads(line) for line in far.get_data(as_text=True).splitlines()]
    assert [e["stream"] for e in events if "stream" in e] == ["stderr"]
    assert events[-1]["event"] == "end"
