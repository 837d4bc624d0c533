"""Money: prices (per GPU-hour, in micro-dollars), the catalog of what the
site sells at what price, an org's spend per calendar month against its
limits, and bills settled from sacct."""
