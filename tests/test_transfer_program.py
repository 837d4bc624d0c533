"""The S3 transfer program's own rules (s3/transfer.py), on a real folder:
which keys become paths, folders opened without following links, a file
known as imported, partial files swept only when their writer is gone; and
the server's side of a transfer: locations, mounts and the run's command."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import signal
import time

import pytest

from divergent.app.services.errors import Invalid
from divergent.app.services.runs.transfers import Transfer, parse_mount, parse_s3_url
from divergent.s3 import transfer as program
from tests.serving import serving


@pytest.mark.parametrize("rel", ["a.txt", "deep/er/file name with spaces ü", "a..b/..c", ".hidden"])
def test_keys_that_are_paths_in_a_volume(rel):
    assert program.relative_parts(rel) == rel.split("/")


@pytest.mark.parametrize(("rel", "why"), [
    ("../up", "'..' would lead out"), ("a/../../up", "'..' would lead out"),
    ("/etc/passwd", "an absolute path"), ("a//b", "an empty or '.' name"),
    ("a/./b", "an empty or '.' name"), ("a/", "an empty or '.' name"),
    ("new\nline", "control characters"), ("bell\x07", "control characters"),
    ("n" * 256, "a name over 255 bytes"), ("d/" * 2100 + "f", "a path over 4096 bytes"),
])
def test_keys_that_are_not_are_refused_saying_why(rel, why):
    with pytest.raises(program.Refused, match=why):
        program.relative_parts(rel)


def test_a_key_is_shown_on_one_line_whatever_it_holds():
    assert program.shown("a\nrefused b: fake\r\x1b[2J") == "a\\nrefused b: fake\\r\\x1b[2J"


def test_folders_open_from_the_volume_never_through_a_link(tmp_path):
    root, outside = tmp_path / "vol", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "file").write_text("x")
    volume = program.Volume(str(root))
    for parts in (["link"], ["link", "sub"], ["file", "sub"]):
        with pytest.raises(program.Refused, match="is a file or a link in the volume"):
            volume.folder(parts, create=True)
    assert list(outside.iterdir()) == []
    volume.folder(["real", "made", "here"], create=True)
    assert (root / "real" / "made" / "here").is_dir()
    with pytest.raises(program.Fatal, match="not a volume this run sees"):
        program.Volume(str(root / "link"))


def test_a_file_is_known_as_imported_until_someone_writes_it(tmp_path):
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    fd = os.open(path, os.O_RDONLY)
    mark = '"etag" 5'
    assert program.set_xattr(fd, program.IMPORTED_XATTR, f"{mark} {os.fstat(fd).st_mtime_ns}")
    os.close(fd)
    assert program._already_imported(folder, "f", 5, mark, 0)
    assert not program._already_imported(folder, "f", 6, mark, 0)
    assert not program._already_imported(folder, "f", 5, '"other" 5', 0)
    time.sleep(0.01)
    path.write_bytes(b"54321")       # a run changed it: same size, new mtime
    assert not program._already_imported(folder, "f", 5, mark, 0)
    assert not program._already_imported(folder, "missing", 5, mark, 0)
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "f")
    with pytest.raises(program.Refused, match="a folder in the volume"):
        program._already_imported(folder, "d", 5, mark, 0)
    with pytest.raises(program.Refused, match="a link in the volume"):
        program._already_imported(folder, "l", 5, mark, 0)


def test_partial_files_go_only_once_their_writer_is_gone(tmp_path):
    partial = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    old = time.time() - 60
    for name in ("dead", "alive", "young"):
        (tmp_path / name).write_bytes(b"part")
    os.utime(tmp_path / "dead", (old, old))
    os.utime(tmp_path / "alive", (old, old))
    writer = os.open(tmp_path / "alive", os.O_WRONLY)
    fcntl.flock(writer, fcntl.LOCK_EX)
    program._sweep_partials(partial)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alive", "young"]
    os.close(writer)


@pytest.mark.parametrize("size", [0, 1000, 8 << 20, (8 << 20) + 1, 3 * (8 << 20)])
def test_a_files_etag_is_the_one_s3_gives_it_as_s3transfer_sends_it(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    if size < program.PART_BYTES:
        expected = hashlib.md5(data).hexdigest()
    else:
        parts = [data[i:i + program.PART_BYTES] for i in range(0, size, program.PART_BYTES)]
        expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
        expected += f"-{len(parts)}"
    assert program._local_etag(fd, os.fstat(fd)) == expected
    assert program._local_etag(fd, os.fstat(fd)) == expected     # from the xattr, unread
    os.close(fd)


def test_locations_and_mounts():
    assert parse_s3_url("s3://my-bucket/a/b/") == parse_s3_url("s3://my-bucket//a/b")
    assert parse_s3_url("s3://my-bucket").prefix == ""
    location, volume = parse_mount("s3://my-bucket/eval/set:/mnt/evalset/")
    assert (location.url, volume) == ("s3://my-bucket/eval/set", "evalset")
    for bad in ("s3://b/x", "s3://ab/x", "s3://bucket_/\x00", "s3://bucket/\ud800",
                "http://bucket/x", "s3:/bucket", "s3://-bucket/x", "s3://bucket/" + "k" * 1025):
        with pytest.raises(Invalid):
            parse_s3_url(bad)
    for bad in ("s3://bucket/x", "s3://bucket/x:/mnt/../etc", "s3://bucket/x:/mnt/"):
        with pytest.raises(Invalid):
            parse_mount(bad)


@pytest.mark.parametrize("prefix", ["plain", "it's $(touch x) `id` \"q\" ;&|<> *", "sp ace/-n"])
def test_a_transfers_command_passes_each_value_as_one_word(prefix):
    location = parse_s3_url(f"s3://bucket/{prefix}")
    words = shlex.split(Transfer("import", "vol", "a b/c'd", location).command())
    assert words == ["python3", "-I", "div_s3.py", "import", f"s3://bucket/{prefix}", "/mnt/vol",
                     "a b/c'd"]
    words = shlex.split(Transfer("export", "vol", "", location).command())
    assert words == ["python3", "-I", "div_s3.py", "export", "/mnt/vol", "", f"s3://bucket/{prefix}"]


def test_a_key_too_deep_is_refused_not_a_recursion():
    with pytest.raises(program.Refused, match="more than 256 folders deep"):
        program.relative_parts("a/" * 1500 + "x")


def test_a_tree_of_many_folders_keeps_few_open(tmp_path):
    volume = program.Volume(str(tmp_path))
    before = len(os.listdir("/proc/self/fd"))
    for i in range(300):
        volume.folder(["top", f"d{i}", "sub"], create=True)
    assert len(os.listdir("/proc/self/fd")) - before <= program.OPEN_FOLDERS
    assert len(list((tmp_path / "top").iterdir())) == 300


def test_clashing_keys_are_found_in_listing_order_holding_few():
    clashes = program.Clashes()
    refused = []
    for rel in sorted(["a", "a-b", "a-b/x", "a.c", "a/x", "a0", "b/c", "b/c/d"]):
        try:
            clashes.check(rel)
        except program.Refused as why:
            refused.append((rel, str(why)))
    assert refused == [("a-b/x", "a-b is both a file and a folder"),
                       ("a/x", "a is both a file and a folder"),
                       ("b/c/d", "b/c is both a file and a folder")]
    assert clashes.files == ["b/c"]      # every file before it passed its region


class Walked:
    """What _walk asks of a transfer: its volume, and where to say things."""

    def __init__(self, root):
        self.volume = program.Volume(str(root))
        self.said = []

    def refuse(self, name, why):
        self.said.append(("refused", name))

    def skip(self, name, st):
        self.said.append(("skipped", name))


def test_export_walks_the_volume_in_the_order_s3_lists_keys(tmp_path):
    for rel in ("a0", "a-x", "a/b", "a/c/d", "b", "ü", ".div-partial/p"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "a" / "c" / "link").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "fifo")
    job = Walked(tmp_path)
    walked = [rel for _, _, rel in program._walk(job, [])]
    assert walked == ["a-x", "a/b", "a/c/d", "a0", "b", "ü"] == sorted(walked)
    assert sorted(job.said) == [("skipped", "a/c/link"), ("skipped", "fifo")]
    assert [rel for _, _, rel in program._walk(Walked(tmp_path), ["a"])] == ["b", "c/d"]


def test_secret_values_never_reach_the_log_even_escaped(monkeypatch, capsys):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t\r")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    program.say(f"Invalid header value {program.shown('s3cr3t' + chr(13))} for AKIAEXAMPLE")
    assert capsys.readouterr().err == "Invalid header value *** for ***\n"


def test_a_partial_folder_another_transfer_removed_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    transfer = program.Transfer(str(tmp_path), "bucket", "import")
    transfer.open_partial()
    os.rmdir(tmp_path / program.PARTIAL)     # another transfer ended, the folder empty
    temp = transfer.partial_file()
    assert (tmp_path / program.PARTIAL / temp.name).exists()
    transfer.close(aborted=True)
    assert not (tmp_path / program.PARTIAL).exists()


def test_a_service_that_stops_answering_ends_the_transfer_in_one_line(tmp_path, monkeypatch):
    from botocore.exceptions import EndpointConnectionError
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    transfer = program.Transfer(str(tmp_path), "bucket", "import")
    transfer.fail("a", program.Refused("a is a link in the volume"))     # a line; it goes on
    with pytest.raises(program.Fatal, match="s3://bucket: the S3 service stopped answering; "
                                            "0 files moved, started again"):
        transfer.fail("b", EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    transfer.close(aborted=True)


def test_a_stop_with_objects_in_flight_cleans_up_through_the_real_library(tmp_path, monkeypatch):
    """s3transfer's own cancel raises TypeError with a transfer in flight;
    close() never depends on it: the in-flight download is cancelled, the
    partial file removed, and the stop goes on as a stop."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self):       # 100 MiB at 6.4 MB/s: in flight for 16 s
            self.send_response(200)
            self.send_header("Content-Length", str(100 << 20))
            self.end_headers()
            for _ in range(1600):
                try:
                    self.wfile.write(b"x" * (64 << 10))
                except OSError:
                    return
                time.sleep(0.01)

        def log_message(self, *args):
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Slow)) as url:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        transfer = program.Transfer(str(tmp_path), "bucket", "import")
        transfer.open_partial()
        temp = transfer.partial_file()
        assert (tmp_path / program.PARTIAL / temp.name).exists()
        future = transfer.manager.download("bucket", "key", os.fdopen(os.dup(temp.fd), "wb"),
                                           extra_args={})
        transfer.submit(future, lambda exc: None)
        # SIGTERM while the program waits for the object, as `div stop` sends it.
        previous = signal.signal(signal.SIGTERM, program._stop)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        try:
            with pytest.raises(program.Stopped):       # never swallowed as one object's failure
                transfer.drain()
        finally:
            signal.signal(signal.SIGTERM, previous)
        assert not future.done()
        stopping = time.monotonic()
        transfer.close(aborted=True)
        assert time.monotonic() - stopping < 10      # at the next chunk, not the object's end (16 s)
        assert not (tmp_path / program.PARTIAL).exists()
