"""`div storage get` keeps a file only when it is whole: against a real HTTP
server that answers as the API does but closes a download early, or sends
bytes that do not match the sha256 it names, the real `div` exits 1, leaves
no file under its final name, and resumes where the short one stopped."""
from __future__ import annotations

import hashlib
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.serving import serving
from tests.test_unattended import _div

BODY = os.urandom(100_000)
ENTRY = {"path": "weights.bin", "type": "file", "size": len(BODY), "mtime": 1_700_000_000}


class ScriptedApi(BaseHTTPRequestHandler):
    """GET /ls as the API answers it; GET /files as `mode` says: "short"
    (half the bytes, then the connection closed), "corrupt" (every byte, one
    of them wrong) or "whole" (Range honoured)."""

    mode = "whole"
    ranges: list[str] = []

    def do_GET(self):
        if "/ls" in self.path:
            self._send(200, json.dumps({"entry": ENTRY, "entries": [ENTRY]}).encode(),
                       {"Content-Type": "application/json"})
            return
        start = int(self.headers.get("Range", "bytes=0-")[6:].rstrip("-"))
        type(self).ranges.append(self.headers.get("Range", ""))
        body = BODY[start:]
        headers = {"X-Div-Sha256": hashlib.sha256(BODY).hexdigest()}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"
        if self.mode == "corrupt":
            body = bytes([body[0] ^ 1]) + body[1:]
        sent = body[:len(body) // 2] if self.mode == "short" else body
        self._send(206 if start else 200, sent, headers, length=len(body))
        self.close_connection = True

    def _send(self, status, body, headers, length=None):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), ScriptedApi)) as url:
        yield url


def _get(api, tmp_path):
    return _div("storage", "get", "models", "weights.bin", cwd=tmp_path, home=tmp_path,
                DIV_API_URL=api, DIV_TOKEN="div_abc_def")


def test_a_download_cut_short_is_exit_1_and_resumes_to_the_whole_file(api, tmp_path):
    ScriptedApi.mode, ScriptedApi.ranges = "short", []
    short = _get(api, tmp_path)
    assert short.returncode == 1
    assert b"weights.bin: the download stopped after 50000 of 100000 bytes" in short.stderr
    assert not (tmp_path / "weights.bin").exists()
    assert (tmp_path / "weights.bin.div-part").stat().st_size == 50_000
    ScriptedApi.mode = "whole"
    again = _get(api, tmp_path)
    assert again.returncode == 0, again.stderr
    assert ScriptedApi.ranges == ["", "bytes=50000-"]
    assert (tmp_path / "weights.bin").read_bytes() == BODY


def test_bytes_that_do_not_match_the_sha256_are_not_kept(api, tmp_path):
    ScriptedApi.mode, ScriptedApi.ranges = "corrupt", []
    corrupt = _get(api, tmp_path)
    assert corrupt.returncode == 1 and b"does not match the file's sha256" in corrupt.stderr
    assert list(tmp_path.glob("weights.bin*")) == []
