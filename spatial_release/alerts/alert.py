"""The alert people receive: what was blocked or breached, where, why, and what can be done about it.

An alert names places (cells, zones, margin areas, with their bucket where one applies), never a unit:
its offending list is built from the identifier fields of a check's offending rows only (`PLACE_KEYS`),
every other field (a leaked value, a column name, a count, a raw row) is dropped, and a string that does not
have the shape of an identifier is refused; a row quoted in the reason (`{...}`) is cut out of it.
`Alert.build(..., never=unit_ids)` also drops any place equal to a known unit id and masks such values in
the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

# refused_release is a notice: a run refused to start a period (already published, or another run of it in
# progress); nothing was blocked and nothing is to be withdrawn. unbacked_publication: a materialisation of a
# published_release that no successful run of its publish job logged (reported by hand in the Dagster UI).
AlertKind = Literal[
    "blocked_release", "risk_breach", "failed_review", "disk_full", "refused_release", "unbacked_publication"
]
KINDS: tuple[str, ...] = get_args(AlertKind)

MAX_OFFENDING = 20
MAX_REASON = 400
SUBJECT_PREFIX = "[spatial_release]"

WITHDRAW = "withdraw the release"
COARSER = "re-publish it coarser (larger cells or buckets, higher k)"
ACCEPT = "accept the risk in review (a policy change with its reason)"
OPTIONS = (WITHDRAW, COARSER, ACCEPT)
STANDS = "nothing to do: the published release stands as its ledger entry records it (releases are immutable)"
WAIT = "nothing to do if the other run of this period is live; if it died, run the period again (it takes over)"
FIX_INPUT = "fix the input (the trace files, the zeros list or the policy) and run the release again"
# Checks of the input, not of what would be published: coarser cells or buckets change nothing of them.
INPUT_CHECKS = frozenset(
    {"validated_pings", "rejected_share", "outside_share", "no_identifiers", "structural_zeros_hold", "earlier_work_files"}
)
# A materialisation of published_release reported by hand: what it means for the period, and what to do.
UNBACKED_STANDS = (
    "nothing to withdraw: the release stands as its ledger entry records it; the materialisation reported by "
    "hand carries none of its files or metadata"
)
UNBACKED_CONFIRM = (
    "run the check published_by_the_publish_job on this partition (the asset's page, Checks): it reads the "
    "ledger and the release folder and passes for a release in place"
)
UNBACKED_NOT_PUBLISHED = (
    "the period is NOT published, whatever the UI shows as materialised: nothing reached the public, and its "
    "check published_by_the_publish_job stays failed on this partition until the publish job publishes it "
    "(run the period's release job: a candidate that passes every check is published)"
)
NO_HAND_REPORTS = "do not report materialisations of published_release by hand: only the publish job publishes"
# A full disk stopped the run: nothing to withdraw or accept; a publication the ledger recorded before the
# disk filled is finished by the next run, under the ledger lock; one it did not record is set aside.
FREE_SPACE = (
    "free space on the device and run the release again: it finishes a publication the ledger recorded, or publishes afresh"
)

# The fields of an offending row that name a place; nothing else of a row reaches an alert.
PLACE_KEYS = {"cell_id": "cell", "area_id": None, "zone": "zone"}
BUCKET_KEYS = ("bucket_start", "bucket")
# An identifier: a word character first, then word characters, blanks and `.:/@+#()-`, at most 80 in all;
# no comma, quote, brace or line break (a CSV or JSON row, a repr), no control character.
IDENTIFIER = re.compile(r"^\w[\w .:/@+#()\-]{0,79}$")


def _is_identifier(value: object) -> bool:
    return isinstance(value, str) and bool(IDENTIFIER.match(value))


@dataclass(frozen=True)
class Place:
    """A cell, a zone or a margin area (with its level), in one bucket or in the whole period."""

    id: str
    level: str | None = None
    bucket: str | None = None

    def __post_init__(self) -> None:
        for name in ("id", "level", "bucket"):
            value = getattr(self, name)
            if value is not None and not _is_identifier(value):
                raise ValueError(f"place {name} {value!r} is not an identifier of a cell, zone or bucket")

    def __str__(self) -> str:
        where = f"{self.level} {self.id}" if self.level else self.id
        return f"{where}, bucket {self.bucket}" if self.bucket else where

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in (("id", self.id), ("level", self.level), ("bucket", self.bucket)) if v is not None}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Place | None:
        """The place a check's offending row names (its cell_id, area_id with level, or zone, and bucket),
        or None when it names none; every other field of the row is ignored."""
        for key, level in PLACE_KEYS.items():
            value = row.get(key)
            if value is None:
                continue
            level = level or row.get("level")
            found = next((row[b] for b in BUCKET_KEYS if row.get(b) is not None), None)
            bucket = None if found is None else str(found.isoformat() if hasattr(found, "isoformat") else found)
            if all(v is None or _is_identifier(v) for v in (str(value), level, bucket)):
                return cls(str(value), level, bucket)
            return None
        return None


def places(items: Iterable[Place | Mapping[str, Any] | str], never: Iterable[str] = ()) -> list[Place]:
    """Places from check rows, place strings or Places, in order, without repeats: rows are reduced to
    their identifier fields, strings and rows that are not identifiers are dropped, and so is any place
    whose id is one of `never` (e.g. the unit ids of the input)."""
    banned = {str(v) for v in never}
    found: list[Place] = []
    for item in items:
        place: Place | None
        if isinstance(item, Place):
            place = item
        elif isinstance(item, Mapping):
            place = Place.from_row(item)
        elif _is_identifier(item):
            place = Place(item)
        else:
            place = None
        if place is not None and place.id not in banned and place.bucket not in banned and place not in found:
            found.append(place)
    return found


def one_line(text: str, limit: int = MAX_REASON) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _without_rows(text: str) -> str:
    """A check's summary quotes its first offending row as a dict (`first: {...}`), which may hold a leaked
    value or a withheld count: an alert keeps the places of the rows (offending) and never the rows."""
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"\{[^{}]*\}", "(row)", text)
    return text


# A reason is masked word by word (and each word part by part, as the identifiers check reads text), so a
# set of a million unit ids costs one pass over the reason, not a million.
_WORD = re.compile(r"[^\s/\\,;'\"()\[\]{}<>=|&?#`*]+")
_PART = re.compile(r"[^-_.@+]+")


def _mask(text: str, never: Iterable[str]) -> str:
    banned = never if isinstance(never, (set, frozenset)) else {str(v).strip() for v in never}
    banned = {v for v in banned if v}
    if not banned:
        return text

    def word(match: re.Match) -> str:
        value = match.group(0)
        if value in banned:
            return "[unit id]"
        return _PART.sub(lambda part: "[unit id]" if part.group(0) in banned else part.group(0), value)

    return _WORD.sub(word, text)


def mask_files(text: str, files: Sequence[str | Path]) -> str:
    """Trace file paths and names in `text` as "input file i of n": a per-device export's name is a unit id,
    and an alert travels further (e-mail, Slack) than the work area that maps the numbers to names."""
    names = [(str(f), f"input file {i} of {len(files)}") for i, f in enumerate(files, 1)]
    names += [(Path(f).name, label) for f, label in names]
    for value, label in sorted(names, key=lambda pair: -len(pair[0])):
        if value:
            text = text.replace(value, label)
    return text


@dataclass(frozen=True)
class Alert:
    """A blocked release, a published release now over its risk budget, a review that failed, a run stopped
    by a full disk, a refused run (a notice), or a materialisation of a published release reported by hand.

    `offending` accepts Places, place strings or a check's offending rows: it keeps the places they name
    (identifier fields only) and at most MAX_OFFENDING of them, counting the rest in `more_offending`.
    `published` says whether the release exists publicly (default: every kind but blocked_release), which
    decides the options.
    """

    kind: AlertKind
    dataset: str
    period: str
    check: str
    reason: str
    offending: tuple[Place, ...] = ()
    more_offending: int = 0
    run_id: str | None = None
    ui_url: str | None = None
    published: bool | None = field(default=None)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"alert kind {self.kind!r} is not one of {KINDS}")
        for name in ("dataset", "period", "check"):
            if not _is_identifier(getattr(self, name)):
                raise ValueError(f"alert {name} {getattr(self, name)!r} is not an identifier")
        if self.run_id is not None and not _is_identifier(self.run_id):
            raise ValueError(f"alert run_id {self.run_id!r} is not an identifier")
        if self.ui_url is not None and not re.match(r"^https?://\S+$", self.ui_url):
            raise ValueError(f"alert ui_url {self.ui_url!r} is not an http(s) URL")
        found = places(self.offending)
        set_ = object.__setattr__
        set_(self, "offending", tuple(found[:MAX_OFFENDING]))
        set_(self, "more_offending", int(self.more_offending) + max(0, len(found) - MAX_OFFENDING))
        set_(self, "reason", one_line(_without_rows(self.reason)) or "(no reason given)")
        if self.published is None:
            set_(
                self,
                "published",
                self.kind not in ("blocked_release", "disk_full", "refused_release", "unbacked_publication"),
            )

    @classmethod
    def build(
        cls,
        kind: AlertKind,
        dataset: str,
        period: str,
        check: str,
        reason: str,
        offending: Iterable[Place | Mapping[str, Any] | str] = (),
        *,
        never: Iterable[str] = (),
        **rest: Any,
    ) -> Alert:
        """An Alert whose offending places and reason carry none of `never` (e.g. the input's unit ids):
        such places are dropped and such values in the reason are masked."""
        never = {str(v).strip() for v in never}
        return cls(
            kind,
            dataset,
            period,
            check,
            _mask(one_line(reason, 10 * MAX_REASON), never),
            tuple(places(offending, never)),
            **rest,
        )

    @property
    def options(self) -> tuple[str, ...]:
        """What can be done: withdraw, re-publish coarser, accept in review; for a release that was never
        published, which of them apply (and fixing the input, which comes first; a check of the input is
        not helped by coarser figures)."""
        if self.kind == "disk_full":
            return (FREE_SPACE,)
        if self.kind == "refused_release":
            return (STANDS,) if self.published else (WAIT,)
        if self.kind == "unbacked_publication":
            return (
                (UNBACKED_STANDS, UNBACKED_CONFIRM, NO_HAND_REPORTS)
                if self.published
                else (UNBACKED_NOT_PUBLISHED, NO_HAND_REPORTS)
            )
        if self.published:
            return tuple(o for o in OPTIONS if o != COARSER or self.check not in INPUT_CHECKS)
        risk = "risk" in self.check
        accept = (
            ACCEPT + ": applies to the risk gate only"
            if risk
            else f"{ACCEPT}: does not apply, {self.check} is a guarantee that is never waived"
        )
        coarser = () if self.check in INPUT_CHECKS else (COARSER,)
        return (FIX_INPUT, *coarser, f"{WITHDRAW}: does not apply, it was never published", accept)

    @property
    def subject(self) -> str:
        notice = "notice, " if self.kind == "refused_release" else ""
        return f"{SUBJECT_PREFIX} {self.dataset} {self.period}: {notice}{self.kind} by {self.check}"

    def offending_lines(self) -> list[str]:
        lines = [str(p) for p in self.offending]
        if self.more_offending:
            lines.append(f"... and {self.more_offending} more")
        return lines or ["(none named)"]

    @property
    def text(self) -> str:
        """The plain-text body of an e-mail."""
        lines = [
            self.subject,
            "",
            f"Dataset:  {self.dataset}",
            f"Period:   {self.period}",
            f"Kind:     {self.kind}",
            f"Check:    {self.check}",
            f"Reason:   {self.reason}",
            f"Published: {'yes' if self.published else 'no'}",
            "",
            "Offending:",
        ]
        lines += [f"  - {line}" for line in self.offending_lines()]
        lines += ["", "Options:"] + [f"  - {option}" for option in self.options]
        lines += ["", f"Run: {self.run_id or '(none)'}"]
        if self.ui_url:
            lines.append(f"Open in Dagster: {self.ui_url}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "dataset": self.dataset,
            "period": self.period,
            "check": self.check,
            "reason": self.reason,
            "offending": [p.to_json() for p in self.offending],
            "more_offending": self.more_offending,
            "published": self.published,
            "options": list(self.options),
            "run_id": self.run_id,
            "ui_url": self.ui_url,
            "subject": self.subject,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Alert:
        return cls(
            data["kind"],
            data["dataset"],
            data["period"],
            data["check"],
            data["reason"],
            tuple(Place(**p) for p in data.get("offending", [])),
            data.get("more_offending", 0),
            data.get("run_id"),
            data.get("ui_url"),
            data.get("published"),
        )
