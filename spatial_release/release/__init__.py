"""The release format: the release folder `<releases>/<dataset>/<period>/` (cells.parquet, margins.parquet,
release.json and the report rendered from them) and how one is published.

- `files`: the published tables, where a release lives, its files' hashes.
- `record`: release.json, typed (`ReleaseRecord` and its parts).
- `staging`: staging, the ledger append, the rename into place, and the recovery of an interrupted
  publication.

Below the pipeline (`stages`) and the report (`report`): this package imports neither; the report's renderer
is passed in to `publish`.
"""

from spatial_release.release.files import (
    RELEASE_FILES,
    ReleaseTables,
    file_hashes,
    published_frames,
    read_tables,
    release_dir,
    release_tables,
    write_tables,
)
from spatial_release.release.record import (
    BUCKET_START,
    K_BOUNDARY,
    AuditVerdict,
    PolicyRef,
    PublicCounts,
    PublicDpFrontierRow,
    PublicFrontier,
    PublicFrontierRow,
    Record,
    ReleaseInputs,
    ReleaseRecord,
    RiskRecord,
)
from spatial_release.release.staging import (
    ABANDONED,
    PENDING,
    STAGING_SUFFIX,
    Renderer,
    finish_pending,
    publish,
    quarantine,
    recover_interrupted,
    staging_dir,
)

__all__ = [
    "ABANDONED",
    "BUCKET_START",
    "K_BOUNDARY",
    "PENDING",
    "RELEASE_FILES",
    "STAGING_SUFFIX",
    "AuditVerdict",
    "PolicyRef",
    "PublicCounts",
    "PublicDpFrontierRow",
    "PublicFrontier",
    "PublicFrontierRow",
    "Record",
    "ReleaseInputs",
    "ReleaseRecord",
    "ReleaseTables",
    "Renderer",
    "RiskRecord",
    "file_hashes",
    "finish_pending",
    "publish",
    "quarantine",
    "read_tables",
    "recover_interrupted",
    "release_dir",
    "published_frames",
    "release_tables",
    "staging_dir",
    "write_tables",
]
