"""The cluster as a site admin sees it: GPUs used and free by type, the
catalog read from Slurm's nodes, `flask doctor`'s end-to-end checks and
what /metrics tells Prometheus."""
