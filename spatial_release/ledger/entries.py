"""Typed ledger entries: a release entry as the publish step writes it and as the stages read it back, by
attribute, and a review entry as the review writes it.

The ledger stores and signs plain JSON objects (their canonical bytes are what the chain hashes); readers
get a `ReleaseEntry` instead, built once from the verified object, so a misspelt field is a type error and
a signed entry that lacks a field a reader needs is reported as a corrupt ledger entry, not a KeyError deep
in the risk stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spatial_release.ledger.errors import LedgerCorrupt


def _corrupt(entry: Mapping[str, Any], reason: str) -> LedgerCorrupt:
    seq = entry.get("seq")
    return LedgerCorrupt(
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None, f"release entry field {reason}"
    )


def _field(entry: Mapping[str, Any], name: str, kind: type) -> Any:
    value = entry.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _corrupt(entry, f"{name!r} is {type(value).__name__}, expected {kind.__name__}")
    return value


def _strings(entry: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = entry.get(name) or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _corrupt(entry, f"{name!r} is not a list of strings")
    return tuple(values)


def _is_loss(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value)
    )


@dataclass(frozen=True, kw_only=True)
class ReleaseEntryBody:
    """What a release entry records, as the publish step writes it: the one spelling of the entry's fields
    (`to_json`, which `Ledger.append` signs; `ReleaseEntry.from_entry` reads them back). The ledger adds
    `seq`, `prev_hash`, `recorded_at`, `signer`, `hash` and `signature` when it appends.

    policy: the policy's name, version and sha256, as the release record names it. files: the release files'
    sha256 by name, as the release record lists them. risk: the risk record of the gate's decision, as
    release.json carries it. population: the population key the release spent its budget on (the dataset's
    name for entries written before populations were recorded). inputs: sha256 of each input file (empty for
    older entries): a programme over the same data is of the same population, whatever its label
    (`history.population_releases`). record_sha256: the whole release record as published, minus the entry
    hash it will carry (an edit of any figure of release.json shows in the cross-check). work_files: the
    sha256 of each file of the release's work area that later releases and reviews read, by its path in the
    work area (None for entries written before they were recorded): an edit of one blocks them by name."""

    dataset: str
    period: str
    policy: Mapping[str, Any] | None
    files: Mapping[str, str] | None
    risk: Mapping[str, Any]
    population: str
    inputs: tuple[str, ...]
    record_sha256: str | None
    work_files: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry's fields as the ledger stores them (before it numbers, chains and signs them)."""
        return {
            "kind": "release",
            "dataset": self.dataset,
            "period": self.period,
            "policy": self.policy,
            "files": self.files,
            "risk": self.risk,
            "population": self.population,
            "inputs": list(self.inputs),
            "record_sha256": self.record_sha256,
            "work_files": self.work_files,
        }

    @property
    def release_figure(self) -> float | None:
        """The risk figure the gate published (None when the gate had none)."""
        figure = self.risk.get("release_figure")
        return float(figure) if figure is not None else None

    @property
    def privacy(self) -> Mapping[str, Any] | None:
        """protection.method dp: the accounting, the loss it spent and the budget (`risk.privacy` of the entry)."""
        privacy = self.risk.get("privacy")
        return dict(privacy) if privacy is not None else None


@dataclass(frozen=True, kw_only=True)
class ReleaseEntry(ReleaseEntryBody):
    """One published release as its (verified) ledger entry records it: its body and where the ledger put it
    (`seq`, `hash`, `recorded_at`)."""

    seq: int
    hash: str
    recorded_at: datetime

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ReleaseEntry:
        """The typed view of a verified release entry; LedgerCorrupt when a field is missing or mistyped."""
        dataset = _field(entry, "dataset", str)
        risk = entry.get("risk") or {}
        figure = risk.get("release_figure") if isinstance(risk, Mapping) else None
        if figure is not None and (not isinstance(figure, int | float) or isinstance(figure, bool)):
            raise _corrupt(entry, "'risk.release_figure' is not a number")
        files = entry.get("files")
        if files is not None and not isinstance(files, Mapping):
            raise _corrupt(entry, "'files' is not an object")
        work_files = entry.get("work_files")
        if work_files is not None and (
            not isinstance(work_files, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in work_files.items())
        ):
            raise _corrupt(entry, "'work_files' is not an object of sha256 strings")
        privacy = risk.get("privacy") if isinstance(risk, Mapping) else None
        if privacy is not None and not (isinstance(privacy, Mapping) and _is_loss(privacy.get("loss"))):
            raise _corrupt(entry, "'risk.privacy' has no loss [number, number]")
        try:
            recorded_at = datetime.fromisoformat(_field(entry, "recorded_at", str))
        except ValueError:
            raise _corrupt(entry, "'recorded_at' is not an ISO time") from None
        return cls(
            seq=_field(entry, "seq", int),
            hash=_field(entry, "hash", str),
            dataset=dataset,
            period=_field(entry, "period", str),
            recorded_at=recorded_at,
            policy=entry.get("policy"),
            population=entry.get("population") or dataset,
            inputs=_strings(entry, "inputs"),
            files=dict(files) if files is not None else None,
            risk=dict(risk) if isinstance(risk, Mapping) else {},
            record_sha256=entry.get("record_sha256"),
            work_files=dict(work_files) if work_files is not None else None,
        )

    @property
    def key(self) -> tuple[str, str]:
        """(dataset, period): what a release is recorded under, once."""
        return self.dataset, self.period


def release_entries(entries: Iterable[Mapping[str, Any]], dataset: str | None = None) -> list[ReleaseEntry]:
    """The release entries among verified ledger entries (of `dataset` only, when given), in ledger order."""
    return [
        ReleaseEntry.from_entry(e)
        for e in entries
        if e.get("kind") == "release" and (dataset is None or e.get("dataset") == dataset)
    ]


def find_release(entries: Iterable[Mapping[str, Any]], dataset: str | None, period: str | None) -> ReleaseEntry | None:
    """The release entry of (dataset, period), or None; a (dataset, period) is recorded at most once."""
    return next(
        (
            ReleaseEntry.from_entry(e)
            for e in entries
            if e.get("kind") == "release" and e.get("dataset") == dataset and e.get("period") == period
        ),
        None,
    )


@dataclass(frozen=True, kw_only=True)
class ReviewEntry:
    """What a review entry records, as the review writes it: the programme, the landscape it reviewed under,
    the cumulative figure, how many releases it reviewed and the periods now over budget."""

    dataset: str
    landscape_sha256: str | None
    cumulative: float
    releases: int
    breaches: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The entry's fields as the ledger stores them (before it numbers, chains and signs them)."""
        return {
            "kind": "review",
            "dataset": self.dataset,
            "landscape_sha256": self.landscape_sha256,
            "cumulative": self.cumulative,
            "releases": self.releases,
            "breaches": list(self.breaches),
        }
