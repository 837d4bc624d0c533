"""`div storage import` / `export` and `div run --mount`, end to end: the
real server and reconciler, the dev Slurm cluster (each transfer is a run
on a node) and the dev S3 server (Debian's Swift), bytes checked by sha256."""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from divergent.cli.hash_cache import file_sha256
from tests.buckets import keys_below, new_bucket, object_sha256, put_objects, s3_client
from tests.conftest import S3_ORG, S3_SECRETS

ORG = S3_ORG


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def org(s3_org):
    return s3_org


@pytest.fixture(scope="module")
def s3(s3_server):
    return s3_client(s3_server)


def div(stack, *args: str, org: str = ORG):
    done = stack.div(*args, cwd=stack.base, org=org, timeout=600)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def volume(stack, name: str, org: str = ORG) -> Path:
    return stack.data_dir / "share" / org / name


def run_name(stderr: str) -> str:
    return re.match(r"(run-[a-z0-9]+) CPU, 2 cores, 4 GiB \$0\.60/h", stderr).group(1)


def summary(stderr: str, verb: str) -> tuple[int, int]:
    """(moved, unchanged) from the transfer's last line."""
    found = re.search(rf"^{verb} ([\d,]+) files? \(.*?\) in [\d.]+s; ([\d,]+) unchanged", stderr, re.M)
    assert found, stderr
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))


def test_import_and_export_round_trip_byte_for_byte(stack, org, s3):
    bucket = new_bucket(s3)
    objects = {"ds/train/a.bin": os.urandom(3 << 20), "ds/train/sub/b.txt": b"hello\n",
               "ds/empty": b"", "ds/names with spaces & ü.txt": os.urandom(1000),
               "ds/big.bin": os.urandom(21 << 20),     # 3 parts of 8 MiB
               "ds-other/not-below-the-prefix": b"x",
               "ds/": b"", "ds/train/": b""}             # a console's folder markers
    put_objects(s3, bucket, objects)
    expected = {key.removeprefix("ds/"): sha(body) for key, body in objects.items()
                if key.startswith("ds/") and not key.endswith("/")}

    rc, out, err = div(stack, "storage", "import", "rt/in", f"s3://{bucket}/ds")
    assert rc == 0, err
    assert out == "" and "Traceback" not in err
    assert summary(err, "imported") == (5, 0)
    assert err.rstrip().splitlines()[-1].startswith(f"{run_name(err)} finished in ")
    assert tree(volume(stack, "rt") / "in") == expected
    assert not (volume(stack, "rt") / ".div-partial").exists()

    rc, _, err = div(stack, "storage", "export", "rt/in", f"s3://{bucket}/back/")
    assert rc == 0, err
    assert summary(err, "exported") == (5, 0)
    assert keys_below(s3, bucket, "back/") == sorted(f"back/{rel}" for rel in expected)
    for rel, digest in expected.items():
        assert object_sha256(s3, bucket, f"back/{rel}") == digest
    # Exported in 8 MiB parts, in parallel.
    assert s3.head_object(Bucket=bucket, Key="back/big.bin")["ETag"].endswith('-3"')

    # Again: nothing moves either way, checked by size and ETag.
    assert summary(div(stack, "storage", "export", "rt/in", f"s3://{bucket}/back")[2],
                   "exported") == (0, 5)
    assert summary(div(stack, "storage", "import", "rt/in", f"s3://{bucket}/ds")[2],
                   "imported") == (0, 5)
    # One file, and one object by its own name.
    rc, _, err = div(stack, "storage", "export", "rt/in/train/sub/b.txt", f"s3://{bucket}/one")
    assert rc == 0 and s3.get_object(Bucket=bucket, Key="one/b.txt")["Body"].read() == b"hello\n"
    rc, _, err = div(stack, "storage", "import", "rt/single", f"s3://{bucket}/ds/big.bin")
    assert rc == 0, err
    assert file_sha256(volume(stack, "rt") / "single" / "big.bin") == expected["big.bin"]


def test_transfers_are_cpu_runs_billed_listed_and_never_hold_the_keys(stack, org, s3, s3_server):
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"k/x": b"1"})
    rc, _, err = div(stack, "storage", "import", "billed", f"s3://{bucket}/k")
    assert rc == 0, err
    name = run_name(err)
    run = stack.run_json(name, ORG)
    assert (run["project"], run["gpu"], run["gpus"], run["status"]) == ("s3", "cpu", 2, "succeeded")
    assert run["cost"] == "0.01" and sorted(run["secrets"]) == sorted(S3_SECRETS)   # a minute at $0.60/h
    listed = div(stack, "ls")[1]
    assert re.search(rf"^{name} +s3 +s3org-user +succeeded +batch +cpu ", listed, re.M), listed
    state = stack.data_dir / "runs" / ORG / name
    written = "".join(p.read_text(errors="replace") for p in state.iterdir() if p.is_file())
    for secret in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL"):
        assert s3_server[secret] not in written, f"{secret}'s value is in {state}"
    assert s3_server["AWS_SECRET_ACCESS_KEY"] not in stack.api("GET", f"/runs/{name}", ORG).text


def test_a_thousand_objects_and_a_killed_transfer_resumed(stack, org, s3):
    """8 objects of 40 MiB, then 1,000 small ones (S3 lists them in that
    order, and they go in that order); the transfer is stopped once the
    first large one has landed, with the others in flight and the small ones
    still to go, however fast the store. What is in the volume then is
    whole; started again it moves only what is missing, and leaves no
    partial file behind."""
    bucket = new_bucket(s3)
    objects = {f"many/small/{i:04d}.txt": os.urandom(100 + i) for i in range(1000)}
    objects.update({f"many/big/{i}.bin": os.urandom(40 << 20) for i in range(8)})
    put_objects(s3, bucket, objects)
    expected = {key.removeprefix("many/"): sha(body) for key, body in objects.items()}
    folder = volume(stack, "resume") / "data"

    rc, name, err = div(stack, "storage", "import", "resume/data", f"s3://{bucket}/many",
                        "--detach")
    assert rc == 0, err
    name = name.strip()
    deadline = time.monotonic() + 120
    while not (folder / "big").is_dir() or not any((folder / "big").iterdir()):
        assert time.monotonic() < deadline, "no large object arrived"
        time.sleep(0.05)
    assert div(stack, "stop", name)[0] == 0
    assert stack.wait_for_status(name, "canceled", timeout=60, org=ORG)["status"] == "canceled"
    # Stopped with objects in flight, through the real s3transfer: never its
    # TypeError (the sandbox may kill the program before it says a word).
    said = div(stack, "logs", name)[2]
    assert "Traceback" not in said and "Error" not in said, said
    landed = tree(folder)
    assert len(landed) < len(expected), "the transfer ended before it was stopped"
    assert all(expected[rel] == digest for rel, digest in landed.items()), "a half file is visible"

    time.sleep(5)    # the killed transfer's partial files are old enough to sweep
    rc, _, err = div(stack, "storage", "import", "resume/data", f"s3://{bucket}/many")
    assert rc == 0, err
    moved, unchanged = summary(err, "imported")
    assert unchanged == len(landed) and moved == len(expected) - len(landed)
    assert tree(folder) == expected
    assert not (volume(stack, "resume") / ".div-partial").exists()
    assert summary(div(stack, "storage", "import", "resume/data", f"s3://{bucket}/many")[2],
                   "imported") == (0, 1008)


def test_a_600_mb_object_goes_in_parts_both_ways(stack, org, s3, tmp_path):
    bucket = new_bucket(s3)
    local = tmp_path / "weights.bin"
    digest = hashlib.sha256()
    with open(local, "wb") as f:
        for _ in range(600 // 20):
            block = os.urandom(20 * 1000 * 1000)
            digest.update(block)
            f.write(block)
    s3.upload_file(str(local), bucket, "w/weights.bin")     # 8 MiB parts
    rc, _, err = div(stack, "storage", "import", "weights", f"s3://{bucket}/w")
    assert rc == 0, err
    assert file_sha256(volume(stack, "weights") / "weights.bin") == digest.hexdigest()
    rc, _, err = div(stack, "storage", "export", "weights/weights.bin", f"s3://{bucket}/copy")
    assert rc == 0, err
    head = s3.head_object(Bucket=bucket, Key="copy/weights.bin")
    assert head["ContentLength"] == 600 * 1000 * 1000 and head["ETag"].endswith('-72"')
    assert object_sha256(s3, bucket, "copy/weights.bin") == digest.hexdigest()


def test_wrong_keys_a_missing_bucket_and_no_keys_are_one_clear_line(stack, org, s3, s3_server):
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"p/x": b"1"})
    stack.add_org("s3wrong")
    for secret in S3_SECRETS:
        value = "not-the-secret" if secret == "AWS_SECRET_ACCESS_KEY" else s3_server[secret]
        stack.div("secrets", "set", secret, cwd=stack.base, org="s3wrong", input=value.encode())
    rc, out, err = div(stack, "storage", "import", "v", f"s3://{bucket}/p", org="s3wrong")
    lines = err.splitlines()
    assert rc == 1 and "Traceback" not in err
    assert lines[1] == (f"s3://{bucket}: the S3 service refused the org's credentials "
                        "(SignatureDoesNotMatch): check the secrets AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY"), err
    assert re.fullmatch(r"run-\w+ failed after \d+s with exit code 1 and spent \$0\.01", lines[2])

    rc, _, err = div(stack, "storage", "import", "v", "s3://no-such-bucket-here/p")
    assert rc == 1 and err.splitlines()[1] == "s3://no-such-bucket-here: no such bucket", err
    rc, _, err = div(stack, "storage", "export", "v", "s3://no-such-bucket-here/p")
    assert rc == 1 and err.splitlines()[1] == "s3://no-such-bucket-here: no such bucket", err
    rc, _, err = div(stack, "storage", "import", "v", f"s3://{bucket}/nothing-here")
    assert rc == 1 and err.splitlines()[1] == f"s3://{bucket}/nothing-here: no objects there"

    stack.add_org("s3none")
    rc, out, err = div(stack, "storage", "import", "v", f"s3://{bucket}/p", org="s3none")
    assert (rc, out) == (2, "")
    assert err == ("the org has no secrets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set the "
                   "bucket's keys first (div secrets set AWS_ACCESS_KEY_ID; AWS_ENDPOINT_URL too, "
                   "for a store other than AWS)\n")
    stack.div("secrets", "set", "AWS_ACCESS_KEY_ID", cwd=stack.base, org="s3none", input=b"x")
    rc, out, err = div(stack, "storage", "import", "v", f"s3://{bucket}/p", org="s3none")
    assert (rc, err) == (2, "the org has no secret AWS_SECRET_ACCESS_KEY: set the bucket's keys "
                            "first (div secrets set AWS_SECRET_ACCESS_KEY; AWS_ENDPOINT_URL too, "
                            "for a store other than AWS)\n")
    rc, _, err = div(stack, "storage", "export", "no-such-volume/x", f"s3://{bucket}/p")
    assert (rc, err) == (2, "no volume named 'no-such-volume'\n")


def test_hostile_keys_and_links_are_refused_and_nothing_leaves_the_volume(stack, org, s3, project):
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {
        "h/ok.txt": b"ok", "h/../escape": b"x", "h//absolute": b"x", "h/./dot": b"x",
        "h/a": b"file", "h/a/b": b"under a file", "h/new\nline": b"x",
        "h/.div-partial/planted": b"x", "h/" + "n" * 256: b"x", "h/etc-link/passwd": b"x",
        "h/folder/": b"",
    })
    # A run plants a link in the volume, to the node's /etc and to another org's share.
    planted = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "ln -s /etc /mnt/hostile/etc-link",
                        cwd=project, org=ORG)
    assert planted.returncode == 0, planted.stderr
    rc, _, err = div(stack, "storage", "import", "hostile", f"s3://{bucket}/h")
    assert rc == 1
    refused = sorted(line for line in err.splitlines() if line.startswith("refused "))
    assert refused == sorted([
        f"refused s3://{bucket}/h/../escape: '..' would lead out of the folder",
        f"refused s3://{bucket}/h//absolute: an absolute path (it starts with /)",
        f"refused s3://{bucket}/h/./dot: an empty or '.' name (// or /./)",
        f"refused s3://{bucket}/h/a/b: a is both a file and a folder",
        f"refused s3://{bucket}/h/new\\nline: control characters in the name",
        f"refused s3://{bucket}/h/.div-partial/planted: .div-partial is where transfers keep "
        "partial files",
        f"refused s3://{bucket}/h/{'n' * 256}: a name over 255 bytes",
        "refused etc-link/passwd: etc-link is a file or a link in the volume, not a folder",
    ]), err
    assert re.search(r"^imported 2 files .*; 8 refused, 0 failed$", err, re.M), err
    root = volume(stack, "hostile")
    assert tree(root) == {"ok.txt": sha(b"ok"), "a": sha(b"file")}
    assert os.readlink(root / "etc-link") == "/etc"
    assert not list(stack.data_dir.rglob("escape")) and not list(stack.data_dir.rglob("absolute"))

    # Export takes regular files only: the link is said, never followed, no failure.
    rc, _, err = div(stack, "storage", "export", "hostile", f"s3://{bucket}/out")
    assert rc == 0 and "skipped etc-link: a link" in err.splitlines(), err
    assert keys_below(s3, bucket, "out/") == ["out/a", "out/ok.txt"]
    rc, _, err = div(stack, "storage", "export", "hostile/etc-link", f"s3://{bucket}/out")
    assert rc == 1 and "etc-link: a link, which export does not follow" in err.splitlines(), err


def test_a_run_mounts_a_prefix_copied_first_and_only_what_changed(stack, org, s3, project):
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"eval/set.bin": b"v1" * 5000, "eval/labels.txt": b"a\nb\n"})
    (project / "read.py").write_text(
        "import hashlib\nprint(hashlib.sha256(open('/mnt/evalset/set.bin', 'rb').read()).hexdigest())\n")
    mount = f"s3://{bucket}/eval:/mnt/evalset"
    first = stack.div("run", "--gpu", "cpu", "--mount", mount, "python read.py", cwd=project, org=ORG)
    err = first.stderr.decode()
    assert first.returncode == 0, err
    assert first.stdout.decode().strip() == sha(b"v1" * 5000)
    assert re.search(rf"^copying {re.escape(mount.replace(':/mnt', ' into /mnt'))}: run-\w+$",
                     err, re.M), err
    assert summary(err, "imported") == (2, 0)

    put_objects(s3, bucket, {"eval/set.bin": b"v2" * 5000})
    again = stack.div("run", "--gpu", "cpu", "--mount", mount, "python read.py", cwd=project, org=ORG)
    assert again.returncode == 0 and again.stdout.decode().strip() == sha(b"v2" * 5000)
    assert summary(again.stderr.decode(), "imported") == (1, 1)

    failing = stack.div("run", "--gpu", "cpu", "--mount", "s3://no-such-bucket-here/x:/mnt/never",
                        "python read.py", cwd=project, org=ORG)
    lines = failing.stderr.decode().splitlines()
    assert failing.returncode == 1 and failing.stdout == b""
    assert "s3://no-such-bucket-here: no such bucket" in lines
    assert re.fullmatch(r"run-\w+ did not start: the copy of s3://no-such-bucket-here/x into "
                        r"/mnt/never \(run-\w+\) did not succeed, and spent \$0\.00", lines[-1])


def test_stopping_a_run_that_waits_for_its_copy_stops_the_copy(stack, org, s3, project):
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"big/weights.bin": os.urandom(300 << 20)})
    (project / "x.py").write_text("")
    started = stack.div("run", "--gpu", "cpu", "--detach", "--json", "--mount",
                        f"s3://{bucket}/big:/mnt/stopped", "x.py", cwd=project, org=ORG)
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)
    assert div(stack, "stop", run["name"])[0] == 0
    copy = run["mounts"][0]["copy"]
    assert stack.wait_for_status(copy, "canceled", timeout=60, org=ORG)["status"] == "canceled"
    ended = stack.wait_for_status(run["name"], "canceled", timeout=60, org=ORG)
    assert ended["status"] == "canceled" and ended["cost"] == "0.00"
    assert stack.api("GET", f"/runs/{run['name']}", ORG).json()["summary"].startswith(
        f"{run['name']} was canceled after 0s")


@pytest.mark.parametrize(("body", "message"), [
    ({"direction": "import", "volume": "../x", "url": "s3://bucket/p"}, "invalid volume name"),
    ({"direction": "import", "volume": "v", "path": "../up", "url": "s3://bucket/p"},
     ".. is not allowed"),
    ({"direction": "import", "volume": "v", "path": "/etc", "url": "s3://bucket/p"},
     "not absolute"),
    ({"direction": "import", "volume": "v", "url": "s3://b/p"}, "invalid bucket name"),
    ({"direction": "import", "volume": "v", "url": "s3://bucket/p\nq"}, "no control characters"),
    ({"direction": "import", "volume": "v", "url": "https://bucket/p"}, "is not an S3 location"),
    ({"direction": "delete", "volume": "v", "url": "s3://bucket/p"}, "direction is import or export"),
    ({"direction": "import", "volume": "v", "path": ".div-partial/x", "url": "s3://bucket/p"},
     "where transfers keep partial files"),
    ({"direction": "import", "volume": "v", "url": "s3://bucket/p", "max_spend": 5},
     "max_spend must be a string"),
    ({"direction": "import", "volume": "v", "url": "s3://bucket/\ud800"}, "not valid Unicode"),
    ({"direction": "import", "volume": "v", "path": "a\u001b[2J", "url": "s3://bucket/p"},
     "may not hold control characters"),
])
def test_the_api_refuses_what_no_transfer_may_be(stack, org, body, message):
    answer = stack.api("POST", "/transfers", ORG, json=body)
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text


def test_a_mount_that_is_not_one_is_refused_before_anything_starts(stack, org, project):
    (project / "x.py").write_text("")
    for mount, message in (("s3://bucket/p:/mnt/../etc", "--mount: '../etc': use lowercase"),
                           ("s3://bucket/p", "a mount is s3://BUCKET/PREFIX:/mnt/NAME"),
                           ("s3://b/p:/mnt/v", "not an S3 location")):
        done = stack.div("run", "--gpu", "cpu", "--mount", mount, "x.py", cwd=project, org=ORG)
        assert done.returncode == 2 and message in done.stderr.decode(), done.stderr
    for mounts, message in ((["s3://bucket/a:/mnt/same", "s3://bucket/b:/mnt/same"], "same /mnt/NAME"),
                            ([f"s3://bucket/p:/mnt/v{i}" for i in range(9)], "at most 8 mounts"),
                            (["s3://bucket/\ud800:/mnt/v"], "not valid Unicode")):
        answer = stack.api("POST", "/runs", ORG, json={
            "project": "p", "command": "true", "gpu": "cpu", "mounts": mounts})
        assert answer.status_code == 400 and message in answer.json()["error"], answer.text
