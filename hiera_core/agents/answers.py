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


def cut_off(text: str) -> str | None:
    """Where `text` was cut off, when it ends inside something it opened: a JSON string, a JSON object or
    array, or a code fence ("inside a JSON string that it never closes"); None when all it opened is
    closed. A server may say `finish_reason: "stop"` for such an answer (a stop sequence, a proxy, a
    streaming hiccup), so the text itself is read. Code in a fence is not read as JSON; brackets in prose
    are, which is harmless as this is asked only of an answer that could not be used."""
    stack: list[str] = []
    in_string, escaped, fence, code = False, False, "", False
    for line in text.splitlines(keepends=True):
        if not in_string and line.lstrip().startswith("```"):
            fence = "" if fence else line.strip()
            code = bool(fence) and fence != "```json"
            continue
        if code and fence == "```" and line.strip():  # a bare fence holds JSON if that is how it begins
            code = not line.lstrip().startswith("{")
        if code:
            continue
        for ch in line:
            if in_string:
                in_string, escaped = _inside_string(ch, escaped)
            elif ch == '"' and stack:
                in_string = True
            elif ch in "{[":
                stack.append(ch)
            elif ch in "}]" and stack:
                stack.pop()
    if in_string:
        return "inside a JSON string that it never closes"
    if stack:
        return f"inside a JSON {'object' if stack[0] == '{' else 'array'} that it never closes"
    if fence:
        return f"inside a code fence ({fence[:20]}) that it never closes"
    return None


def _inside_string(ch: str, escaped: bool) -> tuple[bool, bool]:
    """After `ch`, read inside a JSON string (escaped by the character before it or not): whether the
    string goes on, and whether the next character is escaped."""
    if escaped:
        return True, False
    return ch != '"', ch == "\\"


def _repair_json(text: str, *, close: bool) -> str | None:
    """`text` (starting at a `{`) up to the end of its object, without trailing commas; with `close`,
    missing closing brackets are added at the end. None when a string is left open."""
    out, stack, in_string, escaped = [], [], False, False
    for i, ch in enumerate(text):
        if in_string:
            out.append(ch)
            in_string, escaped = _inside_string(ch, escaped)
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


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "boolean": bool,
}


MAX_VIOLATIONS_SHOWN = 12
"""A message names this many violations at most (and counts the rest)."""


class SchemaError(ValueError):
    """An answer out of its role's schema: every violation, each naming its path, in one message."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        head = f"{len(violations)} schema violations: " if len(violations) > 1 else ""
        shown = violations[:MAX_VIOLATIONS_SHOWN]
        more = f"; and {len(violations) - len(shown)} more" if len(violations) > len(shown) else ""
        super().__init__(head + "; ".join(shown) + more)


def validate(value: Any, schema: dict[str, Any], path: str = "answer") -> None:
    """Check `value` against a JSON-schema subset (type, enum, required, properties,
    additionalProperties, items, minItems, minLength, minimum, maximum); raise SchemaError naming every
    violation with its path, so that one more attempt can fix them all."""
    violations = _violations(value, schema, path)
    if violations:
        raise SchemaError(violations)


def _violations(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    kind = schema.get("type")
    if kind is not None and (not isinstance(value, _JSON_TYPES[kind]) or (kind == "number" and isinstance(value, bool))):
        return [f"{path} must be a JSON {kind}, got {json.dumps(value)[:80]}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path} must be one of {', '.join(map(json.dumps, schema['enum']))}, got {json.dumps(value)[:80]}"]
    found = []
    if kind == "object":
        missing = [key for key in schema.get("required", ()) if key not in value]
        if missing:
            found.append(f"{path} lacks {', '.join(missing)}")
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False and set(value) - set(properties):
            found.append(f"{path} has unknown keys {', '.join(sorted(set(value) - set(properties)))}")
        for key, sub in properties.items():
            if key in value:
                found += _violations(value[key], sub, f"{path}.{key}")
    elif kind == "array":
        if len(value) < schema.get("minItems", 0):
            found.append(f"{path} needs at least {schema['minItems']} item(s)")
        for i, item in enumerate(value):
            found += _violations(item, schema.get("items", {}), f"{path}[{i}]")
    elif kind == "string" and len(value.strip()) < schema.get("minLength", 0):
        found.append(f"{path} is empty")
    elif kind == "number" and (value < schema.get("minimum", value) or value > schema.get("maximum", value)):
        found.append(f"{path} = {value} is outside [{schema.get('minimum')}, {schema.get('maximum')}]")
    return found


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
            "items": {
                "type": "object",
                "required": ["source"],
                "properties": {"source": {"type": "string", "minLength": 1}},
                "additionalProperties": True,
                "description": "only source is read; any other key is ignored (hiera itself records who wrote a"
                " candidate, from which parent, with which parameters)",
            },
        }
    },
}
"""Each candidate's `source` is all an OA answer gives: other keys of an item are ignored, not refused (a
model's habit of adding notes costs no attempt), and nothing of them is recorded."""


def _fenced_sources(text: str) -> list[str]:
    """The bodies of closed fenced code blocks that are not JSON."""
    return [
        body for lang, body in re.findall(r"```([\w+#.-]*)[ \t]*\n(.*?)```", text, flags=re.S) if lang != "json" and body.strip()
    ]


def _unfence(source: str) -> str:
    """A source the model wrapped in a code fence inside the JSON string, unwrapped."""
    stripped = source.strip()
    if stripped.startswith("```") and stripped.endswith("```") and "\n" in stripped:
        stripped = stripped[stripped.index("\n") + 1 : -3]
    return stripped.rstrip() + "\n"
