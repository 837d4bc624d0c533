"""`div run`'s flags and entrypoints, as the docs' tables write them."""
from __future__ import annotations

from decimal import Decimal

import click
import pytest

from divergent.cli.flags import (
    check_hardware,
    command_for,
    parse_check,
    parse_env,
    parse_memory,
    parse_name,
    parse_usd,
    safe_project_name,
)


@pytest.mark.parametrize("words, after_dashes, command", [
    (("train.py::run",), False, "python -u -c 'from train import run; run()'"),
    (("models/lora.py::train",), False, "python -u -c 'from models.lora import train; train()'"),
    (("train.py",), False, "python -u train.py"),
    (("python train.py --lr 3e-4",), False, "python train.py --lr 3e-4"),
    (("torchrun", "--nproc-per-node", "8", "train.py"), True, "torchrun --nproc-per-node 8 train.py"),
    (("mkdir -p /mnt/checkpoints/lora-v1 && python train.py",), True,
     "mkdir -p /mnt/checkpoints/lora-v1 && python train.py"),
    (("python", "-c", "print('a b')"), True, "python -c 'print('\"'\"'a b'\"'\"')'"),
    (("train.py",), True, "train.py"),
])
def test_entrypoints_run_as_the_docs_table_says(words, after_dashes, command):
    assert command_for(words, after_dashes) == command


@pytest.mark.parametrize("words", [("train.py::",), ("train.py::run()",), ("1x.py::run",),
                                   ("../x.py::run",), ("a", "b")])
def test_bad_entrypoints_are_refused(words):
    with pytest.raises(click.UsageError):
        command_for(words, after_dashes=False)


@pytest.mark.parametrize("text, gib", [("64", 64), ("64G", 64), ("64GiB", 64), ("1", 1)])
def test_memory_is_whole_gib(text, gib):
    assert parse_memory(text) == gib


@pytest.mark.parametrize("text", ["512M", "0", "0G", "1.5G", "64 GB", "-1", "", "64g"])
def test_memory_below_one_gib_or_not_whole_is_refused(text):
    with pytest.raises(click.BadParameter):
        parse_memory(text)


@pytest.mark.parametrize("text", ["5", "5.00", "$5", " $5.0 "])
def test_five_dollars_three_ways(text):
    assert parse_usd(text) == 5_000_000


@pytest.mark.parametrize("text", ["0", "$0.00", "-5", "5.001", "five", "$", "5$", "1e3"])
def test_bad_spend_limits_are_refused(text):
    with pytest.raises(click.BadParameter):
        parse_usd(text)


@pytest.mark.parametrize("gpu, gpus, cpus, gib", [
    ("h100", 1, 64, 336), ("h200", 32, 256, 1344), ("cpu", 4, 4, 8), ("h100", 8, 1, 1)])
def test_hardware_within_the_nodes_is_accepted(gpu, gpus, cpus, gib):
    check_hardware(gpu, gpus, cpus, gib)


@pytest.mark.parametrize("gpu, gpus, cpus, gib, flag", [
    ("h100", 1, 65, 8, "--cpu"), ("h100", 1, 0, 8, "--cpu"), ("h100", 1, 1, 337, "--memory"),
    ("h100", 12, 12, 96, "--gpus"), ("h100", 0, 1, 8, "--gpus"), ("cpu", 2, 65, 4, "--cpu")])
def test_hardware_beyond_the_nodes_is_refused_naming_the_flag(gpu, gpus, cpus, gib, flag):
    with pytest.raises(click.BadParameter) as refused:
        check_hardware(gpu, gpus, cpus, gib)
    assert refused.value.param_hint == flag


def test_env_is_key_equals_value_and_values_are_kept_whole():
    assert parse_env(("LR=3e-4", "MSG=a=b c", "EMPTY=")) == {"LR": "3e-4", "MSG": "a=b c", "EMPTY": ""}
    for bad in ("NOVALUE", "1X=2", "A B=c", "=x"):
        with pytest.raises(click.BadParameter):
            parse_env((bad,))


@pytest.mark.parametrize("text, path, op, value", [
    ("metrics.accuracy>=0.8", "metrics.accuracy", ">=", Decimal("0.8")),
    ("metrics.loss<0.6", "metrics.loss", "<", Decimal("0.6")),
    ("status==succeeded", "status", "==", "succeeded"),
    ("metrics.converged!=false", "metrics.converged", "!=", False),
    ("exit_code==0", "exit_code", "==", Decimal("0")),
    ("metrics.eval-set_2.f1>1e-3", "metrics.eval-set_2.f1", ">", Decimal("1e-3")),
])
def test_checks_follow_the_check_syntax(text, path, op, value):
    check = parse_check(text)
    assert (check["path"], check["op"], check["value"]) == (path, op, value)


@pytest.mark.parametrize("text", ["metrics.accuracy>=high", "accuracy", ">=0.8", "metrics..x>1",
                                  "metrics.a b>1", "status<true"])
def test_bad_checks_are_refused(text):
    with pytest.raises(click.BadParameter):
        parse_check(text)


def test_project_defaults_to_the_folder_name_made_safe():
    assert safe_project_name("Very Cool_Classifier!") == "very-cool-classifier"
    with pytest.raises(click.BadParameter):
        safe_project_name("___")
    assert parse_name("run-k4t9", "--name") == "run-k4t9"
    with pytest.raises(click.BadParameter):
        parse_name("Run K", "--name")


def test_the_cli_refuses_the_names_the_server_reserves():
    from divergent.cli import flags
    for name in ("BASH_ENV", "ENV", "SLURM_JOB_ID", "SRUN_X", "DIV_RUN", "div_state",
                 "BASH_FUNC_f", "MASTER_PORT", "NODE_RANK"):
        with pytest.raises(click.BadParameter, match="reserved"):
            flags.parse_env((f"{name}=x",))
        with pytest.raises(click.BadParameter, match="reserved"):
            flags.parse_secret_name(name)
    assert flags.parse_env(("PATH=/x", "LD_PRELOAD=y", "ENVIRONMENT=z")) == {
        "PATH": "/x", "LD_PRELOAD": "y", "ENVIRONMENT": "z"}
