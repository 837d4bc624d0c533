"""Distributed training as ML users write it, with real torch (CPU, gloo) on
the dev cluster's nodes: the docs' `torchrun` form unchanged on one node and
on several, two such runs sharing nodes, a failing rank, the docs' 32 GPUs;
and `pip install` inside a run on runtime `none`."""
from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import zipfile

import pytest

from tests.stack import VENV_BIN

# Every rank adds rank + 1 across the world: n ranks make n(n+1)/2.
ALL_REDUCE = """\
import os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"rank {rank} of {world} on {socket.gethostname()} sum {int(total.item())} "
      f"port {os.environ['MASTER_PORT']}", flush=True)
dist.destroy_process_group()
"""
WORLD_LINE = re.compile(r"rank (\d+) of (\d+) on (node\d) sum (\d+) port (\d+)")


def worlds(stdout: bytes) -> list[tuple[int, int, str, int, int]]:
    return sorted((int(r), int(w), host, int(s), int(p))
                  for r, w, host, s, p in WORLD_LINE.findall(stdout.decode()))


def torchrun(stack, project, *flags: str) -> subprocess.CompletedProcess:
    (project / "ddp.py").write_text(ALL_REDUCE)
    return stack.div("run", "--gpu", "h100", *flags, "--",
                     "torchrun --nproc-per-node 2 ddp.py", cwd=project, timeout=180)


def test_the_docs_torchrun_forms_one_world_on_one_node_and_unchanged_on_two(stack, project):
    one = torchrun(stack, project)
    assert one.returncode == 0, one.stderr
    host = worlds(one.stdout)[0][2]
    assert [w[:4] for w in worlds(one.stdout)] == [(0, 2, host, 3), (1, 2, host, 3)]
    two = torchrun(stack, project, "--gpus", "16")
    assert two.returncode == 0, two.stderr
    first, second = worlds(two.stdout)[0][2], worlds(two.stdout)[2][2]
    assert first != second
    assert [w[:4] for w in worlds(two.stdout)] == [
        (0, 4, first, 10), (1, 4, first, 10), (2, 4, second, 10), (3, 4, second, 10)]
    # Node names resolve both ways inside runs: c10d looks its peers up.
    assert b"cannot be retrieved" not in two.stderr, two.stderr


@pytest.mark.cluster_wide   # both land on the same nodes of an idle cluster
def test_two_runs_on_the_same_nodes_at_once_both_form_their_world(stack, project):
    (project / "ddp.py").write_text(ALL_REDUCE)
    both = [subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", gpu, "--gpus", "16",
                              "--", "torchrun --nproc-per-node 2 ddp.py"], cwd=project,
                             env=stack.div_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for gpu in ("h100", "h200")]
    results = [(proc.wait(timeout=180), *proc.communicate()) for proc in both]
    assert [rc for rc, _, _ in results] == [0, 0], [err for _, _, err in results]
    first, second = (worlds(out) for _, out, _ in results)
    # Each a world of 4 over the same two nodes, each with a port of its own.
    nodes = [first[0][2], first[2][2]]
    for world in (first, second):
        assert [(w[1], w[2], w[3]) for w in world] == [(4, nodes[0], 10)] * 2 + [(4, nodes[1], 10)] * 2
    assert first[0][4] != second[0][4]


FAILING_RANK = """\
import sys, time, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    sys.exit(7)
dist.barrier()
"""


def test_the_first_rank_to_fail_fails_the_run_with_its_exit_code(stack, project):
    # torch.distributed from the env alone: one process a node, RANK and
    # WORLD_SIZE set by divergent; rank 0 fails after, because rank 1 did.
    (project / "fail.py").write_text(FAILING_RANK)
    done = stack.div("run", "--gpu", "h100", "--gpus", "16", "--", "python fail.py",
                     cwd=project, timeout=180)
    assert done.returncode == 7, done.stderr
    assert re.search(r"failed after \d+s with exit code 7 and spent \$", done.stderr.decode())
    name = re.search(r"^(run-\w+) ", done.stderr.decode(), re.M).group(1)
    assert stack.run_json(name)["exit_code"] == 7


@pytest.mark.cluster_wide   # holds every H200
def test_the_docs_thirty_two_gpus_are_one_job_on_four_nodes(stack, project):
    done = stack.div("run", "--gpu", "h200", "--gpus", "32", "--no-upload", "--",
                     'echo "$NODE_RANK $PET_NODE_RANK $RANK of $NNODES $WORLD_SIZE '
                     '$SLURM_JOB_ID $(hostname)"', cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    ranks = sorted(line.split() for line in done.stdout.decode().splitlines())
    assert [r[:6] for r in ranks] == [[str(i)] * 3 + ["of", "4", "4"] for i in range(4)]
    assert len({r[6] for r in ranks}) == 1                     # one Slurm job
    assert [r[7] for r in ranks] == ["node1", "node2", "node3", "node4"]
    assert re.fullmatch(r"run-\w+ 32 x H200 \$\d+\.\d\d/h no spend limit",
                        done.stderr.decode().splitlines()[0])


PIECEMEAL = """\
import os, time
rank = int(os.environ["NODE_RANK"])
start = float(os.environ["START_AT"])
time.sleep(max(0, start - time.time()))      # all nodes write at once
for i in range(300):
    os.write(1, b"node %d line %d" % (rank, i))   # as print(..., flush=True) under -u:
    os.write(1, b"\\n")                          # the text, then the newline
if rank == 0:
    os.write(1, b"no newline at the end")
"""


@pytest.mark.cluster_wide   # holds every H200
def test_each_line_of_each_node_arrives_whole(stack, project):
    import time
    (project / "piecemeal.py").write_text(PIECEMEAL)
    done = stack.div("run", "--gpu", "h200", "--gpus", "32", "--env",
                     f"START_AT={time.time() + 15}", "piecemeal.py", cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    whole = out.replace("no newline at the end", "")
    lines = whole.splitlines()
    assert sorted(lines) == sorted(f"node {n} line {i}" for n in range(4) for i in range(300)), \
        [line for line in lines if not re.fullmatch(r"node \d line \d+", line)][:5]
    assert out.count("no newline at the end") == 1


def small_wheel(folder) -> None:
    """tinypkg 0.1, a wheel made here: the run installs it with no network."""
    files = {"tinypkg/__init__.py": b"ANSWER = 42\n",
             "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
             "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\n"
                                            b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    digests = {name: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
               for name, data in files.items()}
    record = [f"{name},sha256={digests[name].decode()},{len(data)}" for name, data in files.items()]
    folder.mkdir()
    with zipfile.ZipFile(folder / "tinypkg-0.1-py3-none-any.whl", "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tinypkg-0.1.dist-info/RECORD",
                       "\n".join([*record, "tinypkg-0.1.dist-info/RECORD,,"]) + "\n")


def test_pip_install_works_in_a_run_over_the_node_s_python_and_its_torch(stack, project):
    small_wheel(project / "wheels")
    done = stack.div("run", "--gpu", "cpu", "--",
                     "pip install --no-index --find-links /workspace/wheels tinypkg && "
                     "python -c 'import sys, tinypkg, torch; print(tinypkg.ANSWER, sys.prefix)'",
                     cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-1] == "42 /div/python"
    # The run's own: the next run starts without it.
    again = stack.div("run", "--gpu", "cpu", "--no-upload", "--",
                      "python -c 'import tinypkg'", cwd=project, timeout=120)
    assert again.returncode == 1 and b"No module named 'tinypkg'" in again.stderr
