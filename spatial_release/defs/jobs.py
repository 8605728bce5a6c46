import dagster as dg

from spatial_release.defs.assets import GROUP

# Partitioning is inferred from the selected assets (passing partitions_def is deprecated in 1.13).
release_job = dg.define_asset_job(
    "quarterly_release_job",
    selection=dg.AssetSelection.groups(GROUP),
    description="Ingest, count, protect and publish one quarter; blocking checks stop a bad release.",
)
