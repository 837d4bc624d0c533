"""Container images for runtime pyxis: names as Docker writes them, the
site's registries (its mirror, the ones runs may name, the logins that
private ones take from an org's secrets), and a name resolved to the digest
the nodes cache it by (slurm/node/image-pull). It imports no other domain:
runs/images.py puts it to work for a run."""
