"""Reading a policy file: bounded reads of regular files only, strict YAML (`strict_yaml`: YAML 1.2 scalars,
no repeated or merge keys, no aliases), the model's validation with errors naming file and field, and the
files the policy names (structural zeros, landscape) and the programmes it audits with, checked before any
work starts without ever quoting the content of a file it names."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from spatial_release.configfile import (
    MAX_CONFIG_BYTES,
    MAX_ZEROS_BYTES,
    field_name,
    size_text,
)
from spatial_release.configfile import load_yaml as _load_yaml
from spatial_release.configfile import read_config as _read_config
from spatial_release.policy.model import Policy, PolicyError


def _describe(error: ErrorDetails) -> str:
    return f"field '{field_name(list(error['loc']))}': {error['msg']}"


def read_config(path: Path, what: str, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """`configfile.read_config`, refusing with a PolicyError (the policy's files are the user's to fix)."""
    return _read_config(path, what, limit, PolicyError)


def load_yaml(raw: bytes, path: Path, what: str, quote: bool = True) -> object:
    """`configfile.load_yaml`, refusing with a PolicyError."""
    return _load_yaml(raw, path, what, quote, PolicyError)


def parse_policy(data: object, path: Path) -> Policy:
    """Validate parsed YAML `data` as a Policy; PolicyError naming `path` and every bad field
    (`source.time_formats[1]`). The referenced files are not checked here (see `load_policy`)."""
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(_describe(e) for e in exc.errors())
        raise PolicyError(f"{path}: invalid policy: {details}") from None


def _referenced_file(policy: Policy, field: str, relative: str, limit: int) -> Path:
    target = policy.resolve(relative)
    if not target.is_file():  # a device or a FIFO is no file either: it is never opened
        state = "is not a file" if target.exists() else "does not exist"
        raise PolicyError(f"{policy.path}: field '{field}': {target} {state}")
    if target.stat().st_size > limit:  # read whole, by this check and by the run
        raise PolicyError(
            f"{policy.path}: field '{field}': {target} is larger than the {size_text(limit)} such a file may hold"
        )
    return target


def _check_zeros_file(policy: Policy) -> None:
    from spatial_release.policy.zeros import ZerosFileError, read_structural_zeros

    target = _referenced_file(
        policy,
        "suppression.zeros",
        policy.suppression.zeros,  # type: ignore[arg-type]
        MAX_ZEROS_BYTES,
    )
    try:
        read_structural_zeros(target)
    except ZerosFileError:
        # The reader's own message quotes the file's header; the path may be any file, so say only what is wrong.
        raise PolicyError(
            f"{policy.path}: field 'suppression.zeros': {target} is not a structural-zeros list "
            "(a CSV with a 'cell_id' column and an id on every row)"
        ) from None


def _check_landscape_file(policy: Policy) -> None:
    from spatial_release.risk.landscape import Landscape, LandscapeError, read_population_table

    target = _referenced_file(
        policy,
        "risk.landscape",
        policy.risk.landscape,  # type: ignore[union-attr]
        MAX_CONFIG_BYTES,
    )
    try:
        data = load_yaml(read_config(target, "landscape"), target, "landscape", quote=False)
    except PolicyError as exc:
        raise PolicyError(f"{policy.path}: field 'risk.landscape': {exc}") from None
    try:
        landscape = Landscape.model_validate(data)
    except ValidationError as exc:
        # Only the landscape's own field names are shown: a key the schema does not know is file content.
        known = set(Landscape.model_fields)
        details = "; ".join(
            _describe(e) if e["loc"] and e["loc"][0] in known else "a field the landscape schema does not have"
            for e in exc.errors()
        )
        raise PolicyError(f"{policy.path}: field 'risk.landscape': {target} is not a valid landscape: {details}") from None
    try:
        # read here, before any work: the risk stage reads it again after counting and protection have run
        read_population_table(target, landscape)
    except LandscapeError as exc:
        raise PolicyError(f"{policy.path}: field 'risk.landscape': {exc}") from None


def check_referenced_files(policy: Policy) -> None:
    """The structural-zeros list and the landscape exist and read as such, so that a release does not
    stop half-way (after ingest and counting) on a mistyped path."""
    if policy.suppression.zeros:
        _check_zeros_file(policy)
    if policy.risk:
        _check_landscape_file(policy)


def programme_names(folder: Path) -> dict[str, Path]:
    """The dataset `name` of every policy file directly in `folder` (its programmes), read without
    validating the rest: a file that does not even parse is its own programme's error, not this one's."""
    names: dict[str, Path] = {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            data = load_yaml(read_config(path, "policy"), path, "policy")
        except PolicyError:
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            names.setdefault(data["name"], path)
    return names


def check_audit_with(policy: Policy) -> None:
    """Each `suppression.audit_with` dataset is a programme of the policy's own folder (the policies folder
    the code location reads). A mistyped name would otherwise audit with no release of it, silently."""
    if not policy.suppression.audit_with:
        return
    folder = policy.path.parent
    known = {**programme_names(folder), policy.name: policy.path}
    for i, name in enumerate(policy.suppression.audit_with):
        if name not in known:
            raise PolicyError(
                f"{policy.path}: field 'suppression.audit_with[{i}]': {name!r} is not a programme "
                f"of {folder} (its policy files name {sorted(known)}); name the dataset of a "
                "policy file beside this one"
            )


def load_policy(path: str | Path) -> Policy:
    """Read, validate and return the policy file at `path`, with its resolved path and sha256 (which the
    release record and the audit compare). Raises PolicyError (a UserError, exit 2) naming the file and
    the field: unreadable file, not a regular file or larger than MAX_CONFIG_BYTES, invalid YAML or YAML
    that YAML 1.1 and 1.2 read differently, a repeated key, a merge key, an alias, an explicit tag or nesting
    deeper than 32 levels (`strict_yaml`), a field
    the model refuses, a zeros list or landscape that is missing or not such a file, an `audit_with` dataset
    that is no programme of the policy's folder."""
    path = Path(path).resolve()
    raw = read_config(path, "policy")
    policy = parse_policy(load_yaml(raw, path, "policy"), path)
    policy._path = path
    policy._sha256 = hashlib.sha256(raw).hexdigest()
    check_referenced_files(policy)
    check_audit_with(policy)
    return policy
