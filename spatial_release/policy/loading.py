"""Reading a policy file: YAML that refuses a repeated key, the model's validation with errors naming file
and field, and the files the policy names (structural zeros, landscape), checked before any work starts
without ever quoting their content."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from pydantic import ValidationError

from spatial_release.policy.model import Policy, PolicyError


def _location(loc: tuple) -> str:
    """Pydantic's ('source', 'time_formats', 1) as the policy author writes it: source.time_formats[1]."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _describe(error: dict) -> str:
    return f"field '{_location(error['loc'])}': {error['msg']}"


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int, first_line: int) -> None:
        super().__init__(f"duplicate key {key!r} on line {line} (first on line {first_line})")


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with a repeated key. Plain YAML keeps the last value silently, so
    a reviewed policy could show `k: 5` near the top and take `k: 2` from further down."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` merges are overridden by explicit keys on purpose
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in first_line:
                    raise _DuplicateKey(key, line, first_line[key])
                first_line[key] = line
            except TypeError:
                pass  # an unhashable key: SafeLoader reports it below
        return super().construct_mapping(node, deep=deep)


def load_yaml(raw: bytes, path: Path, what: str) -> object:
    """Parse YAML with UniqueKeyLoader; an error names the file and the line, never quotes the file."""
    try:
        return yaml.load(raw, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise PolicyError(f"{path}: not a valid {what}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        raise PolicyError(f"{path}: not valid YAML{where}: {problem}") from None


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


def _referenced_file(policy: Policy, field: str, relative: str) -> Path:
    target = policy.resolve(relative)
    if not target.is_file():
        state = "is not a file" if target.exists() else "does not exist"
        raise PolicyError(f"{policy.path}: field '{field}': {target} {state}")
    return target


def _check_zeros_file(policy: Policy) -> None:
    from spatial_release.geometry.zeros import ZerosFileError, read_structural_zeros

    target = _referenced_file(policy, "suppression.zeros", policy.suppression.zeros)  # type: ignore[arg-type]
    try:
        read_structural_zeros(target)
    except ZerosFileError:
        # The reader's own message quotes the file's header; the path may be any file, so say only what is wrong.
        raise PolicyError(f"{policy.path}: field 'suppression.zeros': {target} is not a structural-zeros list "
                          "(a CSV with a 'cell_id' column and an id on every row)") from None


def _check_landscape_file(policy: Policy) -> None:
    from spatial_release.risk.landscape import Landscape

    target = _referenced_file(policy, "risk.landscape", policy.risk.landscape)  # type: ignore[union-attr]
    try:
        data = load_yaml(target.read_bytes(), target, "landscape")
    except OSError as exc:
        raise PolicyError(f"{policy.path}: field 'risk.landscape': cannot read {target} ({exc.strerror})") from None
    except PolicyError as exc:
        raise PolicyError(f"{policy.path}: field 'risk.landscape': {exc}") from None
    try:
        Landscape.model_validate(data)
    except ValidationError as exc:
        # Only the landscape's own field names are shown: a key the schema does not know is file content.
        known = set(Landscape.model_fields)
        details = "; ".join(_describe(e) if e["loc"] and e["loc"][0] in known else "a field the landscape "
                            "schema does not have" for e in exc.errors())
        raise PolicyError(f"{policy.path}: field 'risk.landscape': {target} is not a valid landscape: "
                          f"{details}") from None


def check_referenced_files(policy: Policy) -> None:
    """The structural-zeros list and the landscape exist and read as such, so that a release does not
    stop half-way (after ingest and counting) on a mistyped path."""
    if policy.suppression.zeros:
        _check_zeros_file(policy)
    if policy.risk:
        _check_landscape_file(policy)


def load_policy(path: str | Path) -> Policy:
    """Read, validate and return the policy file at `path`, with its resolved path and sha256 (which the
    release record and the audit compare). Raises PolicyError (a UserError, exit 2) naming the file and
    the field: unreadable file, invalid YAML or a repeated key, a field the model refuses, a zeros list or
    landscape that is missing or not such a file."""
    path = Path(path).resolve()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror})") from None
    policy = parse_policy(load_yaml(raw, path, "policy"), path)
    policy._path = path
    policy._sha256 = hashlib.sha256(raw).hexdigest()
    check_referenced_files(policy)
    return policy
