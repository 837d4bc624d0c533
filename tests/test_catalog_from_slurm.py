"""`flask site init --from-slurm`: a catalog proposed from sinfo's nodes."""
from __future__ import annotations

from divergent.app.services.cluster.catalog_from_slurm import propose
from divergent.slurm.jobspec import GpuType
from divergent.slurm.records import parse_sinfo_nodes

# Two A100 nodes of 4 (one smaller), an untyped partition, and CPU nodes.
SINFO = (
    "a1|idle|0/32/0/32|245760|gpu*|gpu:A100-SXM4:4(S:0-1)|gpu:A100-SXM4:0(IDX:N/A)\n"
    "a2|mix|8/16/0/24|196608|gpu*|gpu:A100-SXM4:4(S:0-1)|gpu:A100-SXM4:1(IDX:0)\n"
    "a2|mix|8/16/0/24|196608|debug|gpu:A100-SXM4:4(S:0-1)|gpu:A100-SXM4:1(IDX:0)\n"
    "old1|idle|0/16/0/16|131072|older|gpu:2|gpu:0\n"
    "c1|idle|0/64/0/64|262144|batch|(null)|gpu:0\n"
)


def test_each_typed_gres_untyped_partition_and_cpu_partition_is_proposed_at_its_smallest_node():
    proposed = propose(list(parse_sinfo_nodes(SINFO).values()))
    assert proposed == {
        "a100-sxm4": GpuType("a100-sxm4", "gpu", "gpu:A100-SXM4", per_node=4, node_cores=24,
                             node_gib=192),
        "older": GpuType("older", "older", "gpu", per_node=2, node_cores=16, node_gib=128),
        "cpu": GpuType("cpu", "batch", None, memory_gib=2, node_cores=64, node_gib=256)}


def test_the_dev_cluster_proposes_the_docs_types_and_saves_them_priced(runner, app, tmp_path,
                                                                      slurm_cluster):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    proposal = runner.invoke(args=["site", "init", "--from-slurm"])
    assert proposal.exit_code == 0, proposal.output
    assert "h100   h100        h100                  8" in proposal.output
    assert "a proposal only" in proposal.output and not (tmp_path / "site.toml").exists()
    saved = runner.invoke(args=["site", "init", "--from-slurm", "--save"])
    assert saved.exit_code == 0 and "$4.80/h" in saved.output, saved.output
    assert "[gpu.h100]" in (tmp_path / "site.toml").read_text()


def test_a_partition_over_every_node_is_where_cpu_runs_not_a_gpu_type():
    sinfo = "".join(f"{node}|idle|0/{cores}/0/{cores}|{memory}|{part}|{gres}|gpu:0\n"
                    for node, cores, memory, gres, parts in (
                        ("node1", 32, 245760, "gpu:a100:4", ("gpu", "batch")),
                        ("node2", 32, 245760, "gpu:a100:4", ("gpu", "batch")),
                        ("node3", 16, 131072, "gpu:2", ("older", "batch")))
                    for part in parts)
    proposed = propose(list(parse_sinfo_nodes(sinfo).values()))
    assert {name: (gpu.partition, gpu.gres, gpu.per_node) for name, gpu in proposed.items()} == {
        "a100": ("gpu", "gpu:a100", 4), "older": ("older", "gpu", 2), "cpu": ("batch", None, 8)}
    assert (proposed["cpu"].node_cores, proposed["cpu"].node_gib) == (16, 128)
