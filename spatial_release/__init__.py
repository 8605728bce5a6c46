"""spatial_release: k-anonymous distinct-unit counts per spatial cell and time bucket."""

__version__ = "0.1.0"

from spatial_release import codeversion as _codeversion  # noqa: F401 - the code's digest, taken at import
from spatial_release.fileio import restrict_umask as _restrict_umask

# Importing the package makes the process owner-only for new files (see fileio.restrict_umask); every
# work area sets it again, in case the caller changed the umask after the import.
_restrict_umask()
