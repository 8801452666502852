"""A model's answer read strictly: the JSON object in it (fenced or bare, minor damage repaired), checked
against each role's schema, and the source files in it."""

from __future__ import annotations

import json
import re
from typing import Any


def extract_json(text: str, *, complete: bool = True) -> dict[str, Any]:
    """The JSON object in a model's answer, fenced or bare, with text around it and minor damage
    repaired: literal newlines in strings, trailing commas, and (when the answer is `complete`, not cut
    off at the token limit) missing closing brackets."""
    segments = [m.group(1) for m in re.finditer(r"```(?:json)?[ \t]*\n?(\{.*?)```", text, flags=re.S)]
    if "{" in text:
        segments.append(text[text.find("{") :])
    decoder = json.JSONDecoder(strict=False)
    for segment in segments:
        for attempt in (segment, _repair_json(segment, close=complete)):
            if attempt is None:
                continue
            try:
                value, _ = decoder.raw_decode(attempt)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise ValueError("no JSON object found in the answer")


def _repair_json(text: str, *, close: bool) -> str | None:
    """`text` (starting at a `{`) up to the end of its object, without trailing commas; with `close`,
    missing closing brackets are added at the end. None when a string is left open."""
    out, stack, in_string, escaped = [], [], False, False
    for i, ch in enumerate(text):
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
        elif ch == "," and text[i + 1 :].lstrip()[:1] in ("}", "]"):
            continue
        out.append(ch)
        if not stack:
            return "".join(out)
    if in_string or not close:
        return None
    return "".join(out).rstrip().rstrip(",") + "".join(reversed(stack))


_JSON_TYPES = {"object": dict, "array": list, "string": str, "number": (int, float), "boolean": bool}


def validate(value: Any, schema: dict[str, Any], path: str = "answer") -> None:
    """Check `value` against a JSON-schema subset (type, enum, required, properties,
    additionalProperties, items, minItems, minLength, minimum, maximum); raise ValueError naming the path."""
    kind = schema.get("type")
    if kind is not None and (not isinstance(value, _JSON_TYPES[kind]) or (kind == "number" and isinstance(value, bool))):
        raise ValueError(f"{path} must be a JSON {kind}, got {json.dumps(value)[:80]}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{path} must be one of {', '.join(map(json.dumps, schema['enum']))}, got {json.dumps(value)[:80]}")
    if kind == "object":
        missing = [key for key in schema.get("required", ()) if key not in value]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}")
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False and set(value) - set(properties):
            raise ValueError(f"{path} has unknown keys {', '.join(sorted(set(value) - set(properties)))}")
        for key, sub in properties.items():
            if key in value:
                validate(value[key], sub, f"{path}.{key}")
    elif kind == "array":
        if len(value) < schema.get("minItems", 0):
            raise ValueError(f"{path} needs at least {schema['minItems']} item(s)")
        for i, item in enumerate(value):
            validate(item, schema.get("items", {}), f"{path}[{i}]")
    elif kind == "string" and len(value.strip()) < schema.get("minLength", 0):
        raise ValueError(f"{path} is empty")
    elif kind == "number":
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            raise ValueError(f"{path} = {value} is outside [{schema.get('minimum')}, {schema.get('maximum')}]")


def ssda_schema(spaces: list[str], directions: list[str]) -> dict[str, Any]:
    score = {"type": "number", "minimum": 0, "maximum": 1}
    return {
        "type": "object",
        "required": ["space", "scores", "rationale"],
        "properties": {
            "space": {"type": "string", "enum": spaces},
            "scores": {
                "type": "object",
                "required": directions,
                "properties": {d: score for d in directions},
                "additionalProperties": False,
            },
            "rationale": {"type": "string"},
        },
    }


SPA_SCHEMA = {
    "type": "object",
    "required": ["name", "steps", "constraints"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "steps": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "constraints": {"type": "array", "items": {"type": "string"}},
    },
}
JUDGE_SCHEMA = {
    "type": "object",
    "required": ["bottleneck", "method", "steps"],
    "properties": {
        "bottleneck": {"type": "string", "minLength": 1},
        "method": {"type": "string", "minLength": 1},
        "steps": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "constraints": {"type": "array", "items": {"type": "string"}},
    },
}
OA_SCHEMA = {
    "type": "object",
    "required": ["candidates"],
    "properties": {
        "candidates": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object", "required": ["source"], "properties": {"source": {"type": "string", "minLength": 1}}},
        }
    },
}


def _fenced_sources(text: str) -> list[str]:
    """The bodies of closed fenced code blocks that are not JSON."""
    return [body for lang, body in re.findall(r"```([\w+#.-]*)[ \t]*\n(.*?)```", text, flags=re.S) if lang != "json" and body.strip()]


def _unfence(source: str) -> str:
    """A source the model wrapped in a code fence inside the JSON string, unwrapped."""
    stripped = source.strip()
    if stripped.startswith("```") and stripped.endswith("```") and "\n" in stripped:
        stripped = stripped[stripped.index("\n") + 1 : -3]
    return stripped.rstrip() + "\n"

