"""The site: its Slurm settings (instance/site.toml, `flask site`), the one
way every process reaches its Slurm (each failed call counted), the gauges
every server process and the reconciler share for /metrics, and the slots
that bound long requests per org."""
