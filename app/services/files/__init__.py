"""Files: each org's volumes on the shared filesystem and their quota,
content-addressed code uploads, and files put, listed, fetched and deleted,
every path opened through folder descriptors without following links."""
