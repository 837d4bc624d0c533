"""divergent: a GPU compute platform on an organisation's own Slurm cluster.
This package holds what every part of it (the `div` CLI, the server and the
Slurm adapter) says the same way: divergent.terms."""
