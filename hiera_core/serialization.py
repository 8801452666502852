"""The one cattrs converter: records to JSON and back, tagged unions as a `kind` field."""

from __future__ import annotations

import functools
import json
from typing import Any, TypeVar, cast, overload

import cattrs
from cattrs.strategies import configure_tagged_union

import hiera_core.records as records

T = TypeVar("T")


class SchemaMismatch(ValueError):
    """A file on disk was written by a hiera with another record schema."""


def tag(cls: type) -> str:
    """A record's `kind` in a tagged union: its class name in snake case."""
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in cls.__name__).lstrip("_")


@functools.cache
def get_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    configure_tagged_union(records.Evaluation, converter, tag_name="kind", tag_generator=tag)
    optional = records.Evaluation | None
    converter.register_structure_hook(
        optional, lambda data, _: None if data is None else converter.structure(data, cast(Any, records.Evaluation))
    )
    converter.register_unstructure_hook(
        optional, lambda value: None if value is None else converter.unstructure(value, records.Evaluation)
    )
    configure_tagged_union(records.Event, converter, tag_name="kind", tag_generator=tag)
    return converter


def to_dict(record: Any, as_type: Any = None) -> Any:
    return get_converter().unstructure(record, unstructure_as=as_type or type(record))


@overload
def from_dict(data: Any, cls: type[T]) -> T: ...
@overload
def from_dict(data: Any, cls: Any) -> Any: ...
def from_dict(data: Any, cls: Any) -> Any:
    """`data` (JSON-like) as a `cls`: a record class, or a union of them (`records.Event`)."""
    return get_converter().structure(data, cls)


def event_to_line(event: records.Event, at: float | None = None) -> str:
    """One trajectory line: the event, the schema's version and, given `at`, when it was recorded (Unix seconds)."""
    data = {
        "schema_version": records.SCHEMA_VERSION,
        **({"at": round(at, 3)} if at is not None else {}),
        **to_dict(event, records.Event),
    }
    return json.dumps(data, sort_keys=True)


def event_from_line(line: str) -> records.Event:
    return timed_event_from_line(line)[0]


def timed_event_from_line(line: str) -> tuple[records.Event, float | None]:
    """The event of a trajectory line and when it was recorded (None for a line without the time)."""
    data = json.loads(line)
    version = data.pop("schema_version", None)
    at = data.pop("at", None)
    if version != records.SCHEMA_VERSION:
        raise SchemaMismatch(f"record schema {version}, this hiera reads {records.SCHEMA_VERSION}")
    return from_dict(data, records.Event), at


def evaluation_to_json(evaluation: records.Evaluation) -> str:
    return json.dumps(to_dict(evaluation, records.Evaluation), sort_keys=True)


def evaluation_from_json(text: str) -> records.Evaluation:
    return from_dict(json.loads(text), records.Evaluation)
