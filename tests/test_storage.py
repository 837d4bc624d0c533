"""docs/users/storage.md, end to end: `div storage` and runs
against the real server and cluster."""
from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.stack import VENV_BIN, read_terminal


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_guides_walk_through(stack, project, tmp_path):
    # The guide: outside a repository, move the data out of the folder you run from.
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(os.urandom(300_000))
    (data / "labels").mkdir()
    (data / "labels" / "a.csv").write_text("x,y\n1,2\n")
    put = stack.div("storage", "put", "training-data", "./data", cwd=tmp_path)
    assert put.returncode == 0, put.stderr
    assert put.stderr.decode().strip() == "2 files, 300.0 KB → training-data/data"

    (project / "train.py").write_text(
        "import hashlib, os\n"
        "data = open('/mnt/training-data/data/train.parquet', 'rb').read()\n"
        "print(hashlib.sha256(data).hexdigest())\n"
        "os.makedirs('/mnt/checkpoints/lora-v1/final', exist_ok=True)\n"
        "open('/mnt/checkpoints/lora-v1/final/weights.bin', 'wb').write(data[:1000])\n"
        "open('/mnt/checkpoints/lora-v1/final/config.json', 'w').write('{}')\n")
    run = stack.div("run", "--gpu", "cpu", "--", "mkdir -p /mnt/checkpoints/lora-v1 && "
                    "python train.py", cwd=project)
    assert run.returncode == 0, run.stderr
    assert run.stderr.decode().startswith("1 file, ")   # the code, not the data
    assert run.stdout.decode().strip() == sha(data / "train.parquet")

    listed = stack.div("storage", "ls", "checkpoints", "lora-v1", cwd=project)
    assert re.fullmatch(r"SIZE +MODIFIED +NAME\n- +\S+ \S+ +final/\n", listed.stdout.decode())
    out = tmp_path / "out"
    out.mkdir()
    got = stack.div("storage", "get", "checkpoints", "lora-v1/final", cwd=out)
    assert got.returncode == 0, got.stderr
    assert (out / "final" / "weights.bin").read_bytes() == (data / "train.parquet").read_bytes()[:1000]
    assert (out / "final" / "config.json").read_text() == "{}"
    volumes = stack.div("storage", "ls", "--json", cwd=project)
    import json
    by_name = {v["name"]: v for v in json.loads(volumes.stdout)}
    assert by_name["training-data"]["files"] == 2 and by_name["checkpoints"]["files"] == 2
    # The table: data volumes first, the code uploads' volume after, each said.
    rows = stack.div("storage", "ls", cwd=project).stdout.decode().splitlines()[1:]
    holds = ["data" if row.endswith("  data") else row.rsplit("  ", 1)[1] for row in rows]
    assert set(holds) == {"data", "code (div run)"}, rows
    assert holds == sorted(holds, key=lambda kind: kind != "data"), rows
    assert next(row for row in rows if row.startswith("very-cool-classifier-code ")).endswith(
        "  code (div run)")


def test_a_single_file_lands_under_its_name_and_get_skips_what_is_complete(stack, project, tmp_path):
    (project / "weights.bin").write_bytes(os.urandom(2_000_000))
    assert stack.div("storage", "put", "single", "weights.bin", cwd=project).returncode == 0
    assert sha(stack.data_dir / "share/e2e/single/weights.bin") == sha(project / "weights.bin")
    again = stack.div("storage", "put", "single", "weights.bin", cwd=project)
    assert again.stderr.decode().strip() == "0 files, 0 B → single/weights.bin (1 already there)"
    first = stack.div("storage", "get", "single", "weights.bin", cwd=tmp_path)
    second = stack.div("storage", "get", "single", "weights.bin", cwd=tmp_path)
    assert first.returncode == second.returncode == 0
    assert "(1 already complete)" in second.stderr.decode()
    assert sha(tmp_path / "weights.bin") == sha(project / "weights.bin")
    # Into a folder: one named with a trailing /, made if missing, or one that exists.
    for dest in ("into/", "into"):
        done = stack.div("storage", "get", "single", "weights.bin", dest, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert sha(tmp_path / "into" / "weights.bin") == sha(project / "weights.bin")


def test_a_file_over_256_mb_is_refused_before_any_byte(stack, project):
    data = project / "data"
    data.mkdir()
    (data / "small.txt").write_text("ok")
    with open(data / "huge.bin", "wb") as f:       # sparse: 257 MB on paper
        f.truncate(257_000_000)
    before = stack.server_log.read_text().count("\n")
    done = stack.div("storage", "put", "big-data", "./data", cwd=project)
    message = done.stderr.decode()
    assert done.returncode == 2
    assert "huge.bin" in message and "256 MB" in message
    assert "--gpu cpu --no-upload" in message
    assert stack.server_log.read_text().count("\n") == before


def test_a_file_sent_by_sendfile_arrives_whole_and_one_that_shrank_is_not_stored(stack, project):
    """The CLI sends a file's bytes with sendfile(2), exactly as many as it
    announced: a file shorter than that by the time it is sent (it shrank)
    is an error that says so, and the server keeps nothing of it."""
    import pytest

    from divergent.cli.api import ApiClient, ApiUnreachable
    data = os.urandom(3 << 20)
    (project / "whole.bin").write_bytes(data)
    api = ApiClient(stack.url, stack.tokens["e2e"])
    digest = hashlib.sha256(data).hexdigest()
    api.post("/volumes/sent/plan", {"files": []})        # creates the volume
    api.put_file("/volumes/sent/files", str(project / "whole.bin"), len(data),
                 params={"path": "whole.bin"}, headers={"X-Div-Sha256": digest})
    assert stack.api("GET", "/volumes/sent/files", params={"path": "whole.bin"}).content == data
    with pytest.raises(ApiUnreachable, match=r"shrank while it was being sent \(3145728 of "
                                             r"3145729 bytes\); nothing was stored"):
        api.put_file("/volumes/sent/files", str(project / "whole.bin"), len(data) + 1,
                     params={"path": "short.bin"}, headers={"X-Div-Sha256": digest})
    listed = stack.api("GET", "/volumes/sent/ls", params={"path": ""}).json()["entries"]
    assert [e["path"] for e in listed] == ["whole.bin"]
    api.put_file("/volumes/sent/files", str(project / "whole.bin"), len(data),   # the same
                 params={"path": "again.bin"}, headers={"X-Div-Sha256": digest})  # connection
    (project / "empty.bin").write_bytes(b"")     # sendfile refuses a count of 0
    api.put_file("/volumes/sent/files", str(project / "empty.bin"), 0, params={"path": "empty.bin"},
                 headers={"X-Div-Sha256": hashlib.sha256(b"").hexdigest()})
    assert stack.api("GET", "/volumes/sent/files", params={"path": "empty.bin"}).content == b""


def _raw_http(stack, data: bytes, read_until: bytes = b"", wait: float = 10) -> bytes:
    """`data` sent as it is on one connection to the stack's gunicorn; what
    comes back until `read_until` has arrived, or the server closes."""
    import socket
    from urllib.parse import urlsplit
    where = urlsplit(stack.url)
    answer = b""
    with socket.create_connection((where.hostname, where.port), timeout=wait) as conn:
        conn.sendall(data)
        if not read_until:
            conn.shutdown(socket.SHUT_WR)      # the client goes away mid-body
        while (not read_until or answer.count(read_until) < 1) and (got := conn.recv(65536)):
            answer += got
    return answer


def _put_request(stack, volume: str, path: str, body: bytes, length: int | None = None) -> bytes:
    return (f"PUT /api/v1/volumes/{volume}/files?path={path} HTTP/1.1\r\n"
            f"Host: x\r\nAuthorization: Bearer {stack.tokens['e2e']}\r\n"
            f"X-Div-Sha256: {hashlib.sha256(body).hexdigest()}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode() + body


def test_an_upload_read_from_the_socket_keeps_requests_apart_and_refuses_a_cut_body(stack):
    """The server reads a file's body from the connection itself (one copy,
    not gunicorn's three): a request pipelined behind it on the same
    connection is still answered as its own, and a body cut short stores
    nothing and is answered 400 or not at all, never a 500."""
    stack.api("POST", "/volumes/raw/plan", json={"files": []}).raise_for_status()
    first, second = os.urandom(2_000_000), b"small, sent with the headers"
    ls = (f"GET /api/v1/volumes/raw/ls?path= HTTP/1.1\r\nHost: x\r\n"
          f"Authorization: Bearer {stack.tokens['e2e']}\r\n\r\n").encode()
    answers = _raw_http(stack, _put_request(stack, "raw", "one.bin", first)
                        + _put_request(stack, "raw", "two.txt", second) + ls,
                        read_until=b'"entries"')
    assert answers.count(b"HTTP/1.1 201") == 2 and b"one.bin" in answers.split(b"\r\n\r\n")[-1]
    # Refused before its body is read: the body is still drained, and the
    # request behind it is read as a request (schemathesis found this).
    refused = _raw_http(stack, _put_request(stack, "raw", "../out.bin", second) + ls,
                        read_until=b'"entries"')
    assert refused.startswith(b"HTTP/1.1 400") and b"HTTP/1.1 200" in refused
    assert stack.api("GET", "/volumes/raw/files", params={"path": "one.bin"}).content == first
    assert stack.api("GET", "/volumes/raw/files", params={"path": "two.txt"}).content == second
    cut = _raw_http(stack, _put_request(stack, "raw", "cut.bin", first[:1_000_000],
                                        length=len(first)))
    assert b"500" not in cut.split(b"\r\n", 1)[0]
    listed = stack.api("GET", "/volumes/raw/ls", params={"path": ""}).json()["entries"]
    assert sorted(e["path"] for e in listed) == ["one.bin", "two.txt"]
    assert stack.api("GET", "/health").status_code == 200   # and the server goes on


def test_an_interrupted_put_leaves_whole_files_and_finishes_next_time(stack, project):
    data = project / "shards"
    data.mkdir()
    for i in range(30):
        (data / f"shard-{i:02d}.bin").write_bytes(os.urandom(4_000_000))
    proc = subprocess.Popen([str(VENV_BIN / "div"), "storage", "put", "shards", "./shards"],
                            cwd=project, env=stack.div_env(), stderr=subprocess.PIPE)
    landed = stack.data_dir / "share/e2e/shards/shards"
    deadline = time.monotonic() + 60
    while not (landed.is_dir() and any(landed.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = tree(landed)
    assert 0 < len(partial) < 30
    local = tree(data)
    assert all(local[name] == digest for name, digest in partial.items())   # no half file
    time.sleep(1)   # bodies the server had already received still land, whole
    partial = tree(landed)
    assert all(local[name] == digest for name, digest in partial.items())
    again = stack.div("storage", "put", "shards", "./shards", cwd=project)
    assert again.returncode == 0
    assert f"({len(partial)} already there)" in again.stderr.decode()
    assert tree(landed) == local


def test_an_interrupted_get_resumes_with_a_range_request(stack, project, tmp_path):
    (project / "model.bin").write_bytes(os.urandom(200_000_000))
    assert stack.div("storage", "put", "models", "model.bin", cwd=project).returncode == 0
    proc = subprocess.Popen([str(VENV_BIN / "div"), "storage", "get", "models", "model.bin"],
                            cwd=tmp_path, env=stack.div_env(), stderr=subprocess.PIPE)
    part = tmp_path / "model.bin.div-part"
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    had = part.stat().st_size
    assert 0 < had < 200_000_000
    resumed = stack.div("storage", "get", "models", "model.bin", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert sha(tmp_path / "model.bin") == sha(project / "model.bin")
    log = stack.server_log.read_text().splitlines()
    gets = [line for line in log if "GET /api/v1/volumes/models/files" in line]
    # The second GET asked for the rest only.
    assert f'" 206 {200_000_000 - had} ' in gets[-1]


def test_writes_outside_volumes_are_lost_and_the_log_says_how_much(stack, project):
    # The volume name is built at run time, so div run cannot see and create it.
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--",
                     'd=/mnt/scr; d=${d}atch; mkdir -p $d && head -c 1500000 /dev/zero > $d/f',
                     cwd=project)
    assert done.returncode == 0
    log = done.stderr.decode().splitlines()
    assert log[-2] == "1.5 MB written to /mnt/scratch was lost: it is not a volume"


def test_paths_that_leave_a_volume_are_refused(stack, project):
    (project / "f.txt").write_text("x")
    assert stack.div("storage", "put", "safe", "f.txt", cwd=project).returncode == 0
    os.symlink("/etc", stack.data_dir / "share/e2e/safe/out")
    for path in ("../other", "/etc/passwd", "a/../../x", "out/passwd", "a\0b"):
        for method, route in (("GET", "/volumes/safe/ls"), ("GET", "/volumes/safe/files"),
                              ("DELETE", "/volumes/safe/files")):
            answer = stack.api(method, route, params={"path": path})
            assert answer.status_code == 400, (method, path, answer.text)
        put = stack.api("PUT", "/volumes/safe/files", params={"path": path}, data=b"x",
                        headers={"X-Div-Sha256": hashlib.sha256(b"x").hexdigest()})
        assert put.status_code == 400, (path, put.text)
    cli = stack.div("storage", "get", "safe", "out/passwd", cwd=project)
    assert cli.returncode == 1 and b"links in a volume are never followed" in cli.stderr
    assert not (project / "passwd").exists()
    for bad in ("../x", "/x", "UPPER", ".hidden"):
        assert stack.div("storage", "ls", bad, cwd=project).returncode == 2


def test_another_org_never_sees_a_volume_through_the_api_or_a_run(stack, project):
    (project / "secret.txt").write_text("e2e only")
    assert stack.div("storage", "put", "private", "secret.txt", cwd=project).returncode == 0
    for method, route in (("GET", "/volumes/private/ls"), ("GET", "/volumes/private/files"),
                          ("DELETE", "/volumes/private/files"), ("DELETE", "/volumes/private")):
        answer = stack.api(method, route, org="other", params={"path": "secret.txt"})
        assert answer.status_code == 404, (method, route)
    assert "private" not in stack.api("GET", "/volumes", org="other").text
    theirs = stack.data_dir / "share/e2e/private/secret.txt"
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--",
                     f"ls /mnt; cat /mnt/private/secret.txt; cat {theirs}; ls {stack.data_dir}",
                     cwd=project, org="other")
    # Naming /mnt/private made the other org a volume of its own, empty; the
    # share's path to e2e's is not there at all inside the run.
    theirs_listed = {p.name for p in (stack.data_dir / "share/other").iterdir()
                     if not p.name.startswith(".")}
    assert "private" in theirs_listed and done.stdout.decode().split() == sorted(theirs_listed)
    assert list((stack.data_dir / "share/other/private").iterdir()) == []
    assert theirs.read_text() == "e2e only"


def test_deleting_a_whole_volume_asks_or_needs_yes(stack, project):
    (project / "f.txt").write_text("x")
    assert stack.div("storage", "put", "doomed", "f.txt", cwd=project).returncode == 0
    refused = stack.div("storage", "rm", "doomed", cwd=project)
    assert refused.returncode == 2 and b"--yes" in refused.stderr
    assert stack.div("storage", "rm", "doomed", "f.txt", cwd=project).returncode == 0
    assert stack.div("storage", "rm", "doomed", "--yes", cwd=project).returncode == 0
    assert stack.div("storage", "ls", "doomed", cwd=project).returncode == 1


def test_links_inside_the_folder_are_followed_and_links_out_skipped(stack, project):
    data = project / "linked"
    data.mkdir()
    (data / "real.txt").write_text("real")
    os.symlink("real.txt", data / "alias.txt")
    os.symlink("/etc/hostname", data / "outside.txt")
    done = stack.div("storage", "put", "links", "./linked", cwd=project)
    assert done.returncode == 0
    assert "skipped outside.txt: a link to outside" in done.stderr.decode()
    landed = stack.data_dir / "share/e2e/links/linked"
    assert sorted(p.name for p in landed.iterdir()) == ["alias.txt", "real.txt"]
    assert (landed / "alias.txt").read_text() == "real" and not (landed / "alias.txt").is_symlink()


def test_progress_on_a_terminal_only(stack, project):
    import pty
    data = project / "bulk"
    data.mkdir()
    for i in range(8):
        (data / f"{i}.bin").write_bytes(os.urandom(8_000_000))
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(VENV_BIN / "div"), "storage", "put", "bulk-tty", "./bulk"],
                            cwd=project, env=stack.div_env(), stderr=terminal,
                            stdin=subprocess.DEVNULL)
    os.close(terminal)
    seen = read_terminal(controller)
    assert proc.wait() == 0
    # No rate or ETA before a second of it (this one may take less).
    frames = re.findall(rb"\r\x1b\[K(put [^\r]*)", seen)
    assert frames and re.fullmatch(rb"put [\d.]+ [KMG]?B / 64\.0 MB  ETA -", frames[0])
    assert all(re.fullmatch(rb"put [\d.]+ [KMG]?B / 64\.0 MB  (ETA -|[\d.]+ [KMG]?B/s  ETA \d+s)",
                            frame) for frame in frames), frames
    piped = stack.div("storage", "put", "bulk-pipe", "./bulk", cwd=project)
    assert piped.stderr.decode() == "8 files, 64.0 MB → bulk-pipe/bulk\n"


def test_div_runs_upload_line_is_gone_once_the_upload_is_done(stack, project):
    """On a terminal, `uploading N files` is rewritten in place and cleared;
    the line that says what was uploaded stays."""
    import pty
    (project / "big.bin").write_bytes(os.urandom(3_000_000))
    (project / "a.py").write_text("print(1)\n")
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "-d", "a.py"],
                            cwd=project, env=stack.div_env(), stderr=terminal,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    os.close(terminal)
    seen = read_terminal(controller)
    assert proc.wait() == 0, seen
    # a.py's bytes may be on the server already: only what is missing moves.
    assert re.search(rb"\r\x1b\[Kuploading [12] files?, 3\.0 MB\r\x1b\[K2 files, 3\.0 MB "
                     rb"\xe2\x86\x92 ", seen), seen


def test_downloads_give_their_transfer_slot_back(stack, project, tmp_path):
    """A file download holds one of the org's transfer slots while it is
    sent, and gives it back once sent: far more downloads one after another
    than the org has slots all succeed (send_file's body never closed the
    response, so each kept its slot until the server restarted)."""
    (tmp_path / "one.txt").write_bytes(b"once")
    assert stack.div("storage", "put", "slots-back", "one.txt", cwd=tmp_path).returncode == 0
    answers = [stack.api("GET", "/volumes/slots-back/files", params={"path": "one.txt"})
               for _ in range(60)]
    assert [(a.status_code, a.content) for a in answers] == [(200, b"once")] * 60
    ranged = stack.api("GET", "/volumes/slots-back/files", params={"path": "one.txt"},
                       headers={"Range": "bytes=1-"})
    assert (ranged.status_code, ranged.content) == (206, b"nce")
