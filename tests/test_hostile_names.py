"""File names a run may give files in a volume (any bytes but / and NUL:
not UTF-8, escape sequences, newlines, text that looks percent-encoded):
every face of storage lists, fetches and deletes them byte for byte, and
none answers a traceback or a 500."""
from __future__ import annotations

import json
import os
import re

# name (bytes) → what `div storage ls` and the dashboard show of it
NAMES = {
    b"bad\xffname.txt": "bad\\xffname.txt",
    b"esc\x1b[31mred": "esc\\x1b[31mred",
    b"new\nline": "new\\nline",
    b"bad%FFname.txt": "bad%FFname.txt",     # the literal characters: another file
    b"caf\xc3\xa9 menu": "café menu",
    b"L" * 250: "L" * 250,                    # its .div-part name would pass 255 bytes
}
WRITER = """import os
names = {names!r}
os.makedirs(b'/mnt/names/dir\\xfe', exist_ok=True)
for i, name in enumerate(names):
    with open(b'/mnt/names/' + name, 'wb') as f:
        f.write(b'content %d' % i)
    with open(b'/mnt/names/dir\\xfe/' + name, 'wb') as f:
        f.write(b'inner %d' % i)
"""


def test_every_face_handles_any_bytes_a_file_name_may_hold(stack, project, tmp_path):
    (project / "writer.py").write_text(WRITER.format(names=list(NAMES)))
    wrote = stack.div("run", "--gpu", "cpu", "--", "ls /mnt/names; python writer.py", cwd=project)
    assert wrote.returncode == 0, wrote.stderr

    listed = stack.div("storage", "ls", "names", cwd=project)
    assert listed.returncode == 0 and b"Traceback" not in listed.stderr, listed.stderr
    table = listed.stdout.decode()
    assert b"\x1b" not in listed.stdout
    for shown in [*NAMES.values(), "dir\\xfe/"]:
        assert re.search(rf"  {re.escape(shown)}\n", table), (shown, table)
    # JSON keeps each byte (PEP 383's form, as Python's os.fsdecode gives it).
    entries = json.loads(stack.div("storage", "ls", "--json", "names", cwd=project).stdout)
    assert {os.fsencode(e["path"]) for e in entries} == {*NAMES, b"dir\xfe"}

    got = stack.div("storage", "get", "names", "", str(tmp_path / "all"), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    for i, name in enumerate(NAMES):
        assert (tmp_path / "all" / os.fsdecode(name)).read_bytes() == b"content %d" % i
        assert (tmp_path / "all" / "dir\udcfe" / os.fsdecode(name)).read_bytes() == b"inner %d" % i
    one = stack.div("storage", "get", "names", os.fsdecode(b"dir\xfe/bad\xffname.txt"),
                    str(tmp_path / "one.txt"), cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "one.txt").read_bytes() == b"inner 0"

    # The dashboard: the folder, a subfolder and every file's link.
    session = stack.dashboard_session("e2e-user", "names-test-password")
    page = session.get(f"{stack.url}/volumes/names")
    assert page.status_code == 200
    for shown in NAMES.values():
        assert shown in page.text, shown
    links = re.findall(r'href="(/volumes/names\?path=[^"]+)"', page.text)
    assert len(links) == len(NAMES) + 1, links
    for link in links:
        answer = session.get(stack.url + link.replace("&amp;", "&"))
        assert answer.status_code == 200, (link, re.findall(r"<p[^>]*>(.*?)</p>", answer.text, re.S))
    fetched = {r.content for r in (session.get(stack.url + link) for link in links)}
    assert {b"content %d" % i for i in range(len(NAMES))} <= fetched

    # rm deletes the one named, never its look-alike.
    rm = stack.div("storage", "rm", "names", os.fsdecode(b"bad\xffname.txt"), cwd=project)
    assert rm.returncode == 0 and rm.stderr.decode() == "deleted names/bad\\xffname.txt\n"
    left = json.loads(stack.div("storage", "ls", "--json", "names", cwd=project).stdout)
    assert {os.fsencode(e["path"]) for e in left} == {*NAMES, b"dir\xfe"} - {b"bad\xffname.txt"}
