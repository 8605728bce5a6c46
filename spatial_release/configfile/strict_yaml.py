"""YAML for reviewed configuration: what a reviewer reads is what runs.

PyYAML implements YAML 1.1, where `k: 1:0` is 60 (sexagesimal), `k: 0x2` is 2, `k: 010` is 8, `on: yes` is
`True: True`, `<<: {k: 2}` sets k without a `k:` line (a merge key), an alias repeats a value written
elsewhere, and a repeated key keeps its last value silently. `StrictLoader` resolves plain scalars as the
YAML 1.2 core schema does (decimal ints and floats, true/false, null; everything else is text) and refuses,
naming the line and the field, every plain scalar that YAML 1.1 reads as another number or a boolean, merge
keys, anchors and aliases, and repeated keys. Quoting a value always makes it text.

It also refuses explicit tags (`!!int "4_0"` was constructed by Python's int(), which reads `4_0` as 40 and
raised a ValueError on `0x4`; a tag makes a quoted value a number, so what looks like text is not) and
nesting deeper than MAX_DEPTH levels (the composer recurses once per level: `[[[...]]]` 100,000 deep raised
RecursionError, an internal error instead of a refusal naming the line).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
NULL = "tag:yaml.org,2002:null"
_TYPED = (INT, FLOAT, BOOL)
_MAX_DIGITS = 30  # far above any sensible figure; Python refuses ints past 4300 digits with a ValueError
# A policy or landscape nests a few levels (section, list, mapping); 32 is far past any real one and far below
# the interpreter's recursion limit, which the composer and the constructor both recurse towards.
MAX_DEPTH = 32

# the YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), decimal ints only
_RESOLVERS = [
    (BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    (INT, r"^[-+]?[0-9]+$", list("-+0123456789")),
    (FLOAT, r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", list("-+0123456789.")),
    (NULL, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
]


class YamlRefused(yaml.YAMLError):
    """A construct the strict loader refuses: the line (1-based), the field, the problem (which may quote the
    value) and the reason (which quotes nothing of the file: for files a policy names, which may be any file)."""

    def __init__(self, line: int, field: str, problem: str, reason: str) -> None:
        super().__init__(f"line {line}, field '{field}': {problem}")
        self.line, self.field, self.problem, self.reason = line, field, problem, reason


def field_name(parts: list) -> str:
    """('source', 'time_formats', 1) as the author writes it: source.time_formats[1]."""
    text = ""
    for part in parts:
        if part is None:
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _yaml11_tag(value: str) -> str | None:
    """The tag PyYAML's YAML 1.1 SafeLoader gives the plain scalar `value`."""
    resolvers = yaml.SafeLoader.yaml_implicit_resolvers
    for tag, pattern in [*resolvers.get(value[:1], []), *resolvers.get(None, [])]:
        if pattern.match(value):
            return tag
    return None


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader with YAML 1.2 core resolution that refuses what YAML 1.1 reads differently, merge keys,
    anchors and aliases, and repeated keys (YamlRefused, naming the line and the field)."""

    yaml_implicit_resolvers: dict = {}

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._fields: list = []  # where the composer is: keys and sequence positions

    def _refuse(self, mark: yaml.Mark, problem: str, reason: str, *last: object) -> YamlRefused:
        return YamlRefused(mark.line + 1, field_name([*self._fields, *last]), problem, reason)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if isinstance(index, yaml.ScalarNode):
            part: object = index.value  # a mapping's value: its key
        else:
            part = index if isinstance(index, int) else None  # a sequence position, or a key
        self._fields.append(part)
        try:
            event = self.peek_event()
            self._check_depth_and_tag(event)
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                # a value written once and used twice is two fields a reviewer reads as one
                raise self._refuse(
                    event.start_mark,
                    "anchors (&name) and aliases (*name) are not allowed: write the value out where it applies",
                    "an anchor or alias (not allowed)",
                )
            return super().compose_node(parent, index)
        finally:
            self._fields.pop()

    def _check_depth_and_tag(self, event: Any) -> None:
        """Refuse a node nested deeper than MAX_DEPTH (checked before composing it, so no deep recursion ever
        starts) and a node with an explicit tag (`!!int`, `!!str`, `!local`, `!`): only the schema types.
        `event`: the node's first parser event, as `peek_event` returns it."""
        if len(self._fields) > MAX_DEPTH:
            raise self._refuse(
                event.start_mark,
                f"nested deeper than {MAX_DEPTH} levels: a policy or landscape is a few levels deep",
                f"nesting deeper than {MAX_DEPTH} levels (not allowed)",
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            # the value's type is the schema's reading of what is written: `!!int "4_0"` was 40
            spelt = tag.replace("tag:yaml.org,2002:", "!!")[:40]
            raise self._refuse(
                event.start_mark,
                f"explicit tags ({spelt}) are not allowed: write a number in plain decimals, and quote text",
                "an explicit tag (not allowed)",
            )

    # types-PyYAML's stub types `anchor` as dict[Any, Node]; PyYAML passes the event's anchor, a str or None
    def compose_scalar_node(self, anchor: str | None) -> yaml.ScalarNode:  # type: ignore[override]
        node = super().compose_scalar_node(anchor)  # type: ignore[arg-type]  # the stub's anchor type, as above
        if node.style is None:  # plain: its type comes from the schema (quoted scalars are text)
            problem = self._plain_problem(node)
            if problem:
                raise self._refuse(node.start_mark, *problem)
        return node

    def _plain_problem(self, node: yaml.ScalarNode) -> tuple[str, str] | None:
        """(problem, reason) for a plain scalar YAML 1.1 types otherwise than YAML 1.2, else None."""
        old = _yaml11_tag(node.value)
        if node.tag == INT and len(node.value.lstrip("+-")) > _MAX_DIGITS:
            return f"{node.value[:12]}... has more than {_MAX_DIGITS} digits", "a number with too many digits"
        if old not in _TYPED:
            return None
        old_value = yaml.SafeLoader.yaml_constructors[old](self, node)
        new_value = self.yaml_constructors[node.tag](self, node) if node.tag in _TYPED else node.value
        if type(old_value) is type(new_value) and old_value == new_value:
            return None
        if old == BOOL:
            return (
                f"{node.value!r} is a YAML 1.1 boolean ({old_value}) and YAML 1.2 text: write true or false, "
                "or quote it as text"
            ), "a YAML 1.1 boolean that is YAML 1.2 text (not allowed unquoted)"
        return (
            f"{node.value!r} is a YAML 1.1 number ({old_value!r}: sexagesimal, hexadecimal, octal, with "
            f"underscores or infinite) that YAML 1.2 reads as {new_value!r}: write the number in plain "
            "decimals, or quote it as text"
        ), "a YAML 1.1 number that YAML 1.2 reads otherwise (not allowed)"

    # types-PyYAML's stub types `anchor` as dict[Any, Node]; PyYAML passes the event's anchor, a str or None
    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:  # type: ignore[override]
        node = super().compose_mapping_node(anchor)  # type: ignore[arg-type]  # the stub's anchor type, as above
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # SafeLoader refuses an unhashable key itself
            if key_node.style is None and key_node.value == "<<":
                # a merge key sets fields that have no line of their own in the file
                raise self._refuse(
                    key_node.start_mark,
                    "merge keys (<<) are not allowed: write each key out",
                    "a merge key (<<, not allowed)",
                    "<<",
                )
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise self._refuse(
                    key_node.start_mark,
                    f"duplicate key {key!r} on line {line} (first on line {first_line[key]})",
                    "a duplicate key",
                    str(key),
                )
            first_line[key] = line
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        return int(self.construct_scalar(node))  # decimal only: `010` is 10, as in YAML 1.2

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        return float(self.construct_scalar(node))


for _tag, _pattern, _first in _RESOLVERS:
    StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)
StrictLoader.add_constructor(INT, StrictLoader.construct_yaml_int)
StrictLoader.add_constructor(FLOAT, StrictLoader.construct_yaml_float)
