"""The paper's three agent roles over any backend: prompts in, validated structured answers out.

SSDA (`Agents.select_space`) chooses the implementation space and scores the directions (Eq. 3-4);
SPA (`Agents.plan_strategy`) turns space and direction into a strategy (Eq. 5); OA writes K candidate
sources (Eq. 6), as several requests in flight at once when the backend allows it. Every request carries
the prompt a model reads and the same context as data, so a rule-based backend (`expert`) answers
through the same path as a model. The role skeletons live here; the knowledge they quote belongs to the
plugins that own it: a direction's description, the architecture plugins' knowledge, rubric and strategies
of it (the run's `RunContext.knowledge`), a space's description, a workload's contract, an architecture's
toolchain.

Every call goes through the run's answer cache (`cache/llm/<key>.json`, the key a hash of the request):
an identical request is answered from it without calling the backend (a resumed run pays nothing twice),
and `hiera run --replay` answers a whole run from another run's cache. Every call is recorded in the
trajectory as an `AgentCalled` event: tokens, money, wall time, and why an answer was unusable.

How a round searches is a search strategy (`[run] strategy`), a plugin like any other
(`hiera_register_searches`; the built-ins, HIERA's loop and the paper's two baselines, are in
`hiera_plugins.searches`): it asks these agents for the round's sources its own way.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from hiera_core import records
from hiera_core.plugins import PluginError, one_line
from hiera_core.protocols import AgentAnswer, AgentRequest, BackendError
from hiera_core.records import (
    Candidate,
    CompileFailed,
    Contract,
    Crashed,
    Evaluation,
    Incorrect,
    Measured,
    Rejected,
    Plan,
    SpaceDecision,
    StaticRejected,
    Strategy,
    Task,
    TimedOut,
)
from hiera_core.serialization import from_dict, to_dict
from hiera_core.store import write_text_atomic

if TYPE_CHECKING:
    from hiera_core.session import Session

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 3
"""A request whose answer is unusable (or that the backend could not answer) is asked again, with the
error, up to this many times in all."""
ANSWER_CACHE = Path("cache") / "llm"
"""Where a run directory keeps its recorded answers."""
FILE_LIMIT = 4000
"""Characters of one frozen contract file quoted in a prompt."""
LOG_LIMIT = 1500
"""Characters of one compiler log or failure quoted in a prompt."""
FENCE_LANGUAGE = {".c": "c", ".h": "c", ".cu": "cuda", ".cpp": "cpp", ".py": "python", ".json": "json"}


class AgentError(Exception):
    """An agent gave no usable answer within its attempts."""


@attrs.frozen(kw_only=True)
class PlanningContext:
    """What the agents know at the start of a round."""

    round: int
    task: Task
    arch: str
    kind: str
    """The architecture's kind (`Architecture.kind`): what the workload's side and templates are written for."""
    contract: Contract
    """The frozen contract: the file a candidate writes, its interface, the frozen files."""
    toolchain: dict[str, Any]
    """The architecture's toolchain (compiler, version, flags), quoted so the model writes for it."""
    parent: Candidate | None
    parent_evaluation: Evaluation | None
    parents: list[Candidate]
    history: list[tuple[Candidate, Evaluation]]
    plans: list[Plan]
    """The plans of earlier rounds, oldest first."""
    allowed_spaces: list[str]
    planning: bool


@attrs.frozen(kw_only=True)
class GeneratedSource:
    source: str
    params: dict[str, Any] = attrs.field(factory=dict)
    origin: str = ""
    parent_id: str | None = None


@attrs.frozen(kw_only=True)
class Generation:
    """What a round's generation produced: the sources, how to label their candidates, what went wrong."""

    sources: list[GeneratedSource]
    space: str
    """The space every source was written for (and is checked against)."""
    direction: str | None
    strategy: str
    notes: list[str] = attrs.field(factory=list)


# --- answers: JSON extraction, repair and schema validation -----------------------------------


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


# --- prompt sections --------------------------------------------------------------------------


_METRIC_GROUPS = (
    ("time", {"ms", "us", "ns", "s", "cycles"}),
    ("throughput", {"gbps", "gflops", "tflops", "throughput"}),
    ("utilisation", {"fraction", "pct", "percent", "ratio", "utilization", "occupancy", "efficiency"}),
    ("size", {"bytes", "sectors", "requests"}),
)
"""Metrics are grouped by the unit their name carries (`task_ns_per_point`, `achieved_gbps`, ...)."""


def _labelled(name: str, value: float) -> tuple[str, str]:
    """(group, `name = value`) of one metric; a fraction also as a percentage."""
    tokens = set(re.split(r"[_.]+", name.lower()))
    group = next((group for group, units in _METRIC_GROUPS if tokens & units), "counts and other")
    shown = f"{value:,.0f}" if float(value).is_integer() and abs(value) >= 1e4 else f"{value:.4g}"
    return group, f"{name} = {shown}" + (f" ({value:.0%})" if "fraction" in tokens else "")


def profile_summary(evaluation: Evaluation | None, directions: dict[str, Any]) -> str:
    """A measurement as a prompt reads it: latency and reference, metrics grouped by the unit their
    name carries, signals grouped by the directions that read them (`Direction.signals`), then the top findings."""
    if evaluation is None:
        return "not measured yet"
    if not isinstance(evaluation, Measured):
        return execution_feedback(evaluation)
    lines = [
        f"latency {evaluation.latency_ms:.4g} ms (p10 {evaluation.latency_p10_ms:.4g}, p90 {evaluation.latency_p90_ms:.4g},"
        f" {evaluation.repeats} timed calls); the reference takes {evaluation.reference_latency_ms:.4g} ms"
        f" ({evaluation.speedup_vs_reference:.2f}x)"
    ]
    profile = evaluation.profile
    if profile is None:
        return "\n".join(lines)
    if profile.unavailable:
        lines.append(f"profiler counters unavailable: {profile.unavailable}")
    grouped: dict[str, list[str]] = {}
    for name, value in sorted(profile.metrics.items()):
        group, text = _labelled(name, value)
        grouped.setdefault(group, []).append(text)
    if grouped:
        lines.append(f"metrics ({profile.source}), by unit:")
        order = [group for group, _ in _METRIC_GROUPS] + ["counts and other"]
        lines += [f"- {group}: {'; '.join(grouped[group])}" for group in order if group in grouped]
    if profile.signals:
        by_reader: dict[str, list[str]] = {}
        for name, value in sorted(profile.signals.items()):
            readers = [letter for letter, d in directions.items() if name in getattr(d, "signals", ())]
            reader = "unclaimed" if not readers else ("shared (headroom)" if len(readers) > 2 else " and ".join(readers))
            by_reader.setdefault(reader, []).append(f"{name} = {value:.2f}")
        lines.append("signals (normalised, 1 = healthy), by the direction that reads them:")
        lines += [f"- {reader}: {'; '.join(by_reader.pop(reader))}" for reader in [*directions, *sorted(by_reader)] if reader in by_reader]
    if profile.findings:
        lines.append("top findings:")
        lines += [f"- {finding}" for finding in profile.findings[:5]]
    return "\n".join(lines)


def execution_feedback(evaluation: Evaluation) -> str:
    """What running a candidate gave, without any profile: all a generate-and-fix loop sees."""
    if isinstance(evaluation, Measured):
        return (
            f"correct; {evaluation.latency_ms:.4g} ms, the reference takes {evaluation.reference_latency_ms:.4g} ms"
            f" ({evaluation.speedup_vs_reference:.2f}x)"
        )
    if isinstance(evaluation, CompileFailed):
        return f"did not compile:\n{evaluation.log[-LOG_LIMIT:]}"
    if isinstance(evaluation, Incorrect):
        return f"compiled and ran, but the output is wrong: {evaluation.reason[:LOG_LIMIT]}"
    if isinstance(evaluation, Crashed):
        return f"crashed: {evaluation.reason[:LOG_LIMIT]}"
    if isinstance(evaluation, TimedOut):
        return f"was killed after {evaluation.limit_s:.0f} s (too slow, or it hangs)"
    if isinstance(evaluation, StaticRejected):
        return f"was rejected before compiling: {evaluation.reason[:LOG_LIMIT]}"
    if isinstance(evaluation, Rejected):
        return f"ran correctly, but its measurement was rejected as impossible: {evaluation.reason[:LOG_LIMIT]}"
    raise TypeError(f"unknown evaluation {type(evaluation).__name__}")


def _outcome(evaluation: Evaluation) -> str:
    if isinstance(evaluation, Measured):
        return f"{evaluation.latency_ms:.4g} ms"
    first = execution_feedback(evaluation).splitlines()
    return f"{type(evaluation).__name__}: {first[0][:160] if first else ''}"


def _fence(text: str, filename: str) -> str:
    return f"```{FENCE_LANGUAGE.get(Path(filename).suffix, '')}\n{text.rstrip()}\n```"


def _task_section(ctx: PlanningContext) -> str:
    return f"# Task: {ctx.task.name} ({ctx.task.workload}), round {ctx.round}\n{ctx.task.description}"


def _contract_section(ctx: PlanningContext) -> str:
    contract = ctx.contract
    lines = [
        f"# Contract\nYou write exactly one file, `{contract.source_filename}`; everything else is frozen."
        f" It must define:\n{contract.interface.rstrip()}"
    ]
    for name, text in sorted(contract.files.items()):
        cut = "" if len(text) <= FILE_LIMIT else f"\n(first {FILE_LIMIT} of {len(text)} characters)"
        lines.append(f"## Frozen file `{name}`\n{_fence(text[:FILE_LIMIT], name)}{cut}")
    return "\n".join(lines)


def _target_section(ctx: PlanningContext) -> str:
    tools = "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in ctx.toolchain.items())
    return f"# Target\nArchitecture `{ctx.arch}`. The file is built with {tools}."


def _subject_section(title: str, candidate: Candidate | None, feedback: str, filename: str) -> str:
    if candidate is None:
        return f"# {title}\n(none yet)"
    label = f"`{candidate.id}` (round {candidate.round}, {candidate.strategy or 'initial candidate'})"
    return f"# {title}: {label}\n{_fence(candidate.source, filename)}\n## What running it gave\n{feedback}"


def _failures_section(ctx: PlanningContext) -> str:
    failed = [(c, e) for c, e in ctx.history if c.round == ctx.round - 1 and not isinstance(e, Measured)]
    if not failed:
        return ""
    lines = [f"# Failures of round {ctx.round - 1} (avoid repeating them)"]
    for i, (candidate, evaluation) in enumerate(failed):
        text = execution_feedback(evaluation) if i < 3 else _outcome(evaluation)
        lines.append(f"- `{candidate.id}` ({candidate.strategy or '-'}): {text}")
    return "\n".join(lines)


def _decisions_section(ctx: PlanningContext) -> str:
    if not ctx.plans:
        return ""
    lines = ["# Decisions so far"]
    for plan in ctx.plans:
        scores = " ".join(f"{d}={s:.2f}" for d, s in plan.decision.scores.items())
        results = [e.latency_ms for c, e in ctx.history if c.round == plan.round and isinstance(e, Measured)]
        evaluated = sum(1 for c, _ in ctx.history if c.round == plan.round)
        best = f"round best {min(results):.4g} ms" if results else "no valid candidate"
        lines.append(
            f"- round {plan.round}: space {plan.decision.space}, direction {plan.decision.direction} ({scores}),"
            f" strategy {plan.strategy.name}: {len(results)}/{evaluated} valid, {best}"
        )
    return "\n".join(lines)


def _history_section(ctx: PlanningContext, limit: int = 12) -> str:
    rows = [
        f"- `{c.id}` round {c.round} {c.space} {c.direction or '-'} {c.strategy or 'initial'}: {_outcome(e)}"
        for c, e in ctx.history[-limit:]
    ]
    return "# Candidates so far (latest last)\n" + ("\n".join(rows) or "- none")


def _join(*sections: str) -> str:
    return "\n\n".join(s for s in sections if s)


def _answer_format(schema: dict[str, Any], example: dict[str, Any]) -> str:
    return (
        "# Answer\nOne JSON object that follows this JSON schema, and nothing else:\n"
        f"{json.dumps(schema)}\nFor example:\n{json.dumps(example)}"
    )


# --- the answer cache -------------------------------------------------------------------------


def request_key(request: AgentRequest) -> str:
    """The content address of a request: a hash of its prompt and its place in the run."""
    fields = {
        "role": request.role,
        "round": request.round,
        "sample": request.sample,
        "attempt": request.attempt,
        "candidates": request.candidates,
        "prompt": request.prompt,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


class AnswerCache:
    """A run's recorded answers: one `RecordedAnswer` JSON file per request, named by `request_key`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, request: AgentRequest) -> records.RecordedAnswer | None:
        file = self.path / f"{request_key(request)}.json"
        return from_dict(json.loads(file.read_text()), records.RecordedAnswer) if file.is_file() else None

    def put(self, request: AgentRequest, answer: AgentAnswer, backend: str) -> None:
        recorded = records.RecordedAnswer(
            backend=backend, **_fields_of(request, records.RecordedAnswer), **_fields_of(answer, records.RecordedAnswer)
        )
        write_text_atomic(self.path / f"{request_key(request)}.json", json.dumps(to_dict(recorded), indent=1, sort_keys=True))

    def entries(self) -> list[records.RecordedAnswer]:
        """Every recorded answer, oldest file first."""
        files = sorted(self.path.glob("*.json"), key=lambda f: f.stat().st_mtime_ns) if self.path.is_dir() else []
        return [from_dict(json.loads(f.read_text()), records.RecordedAnswer) for f in files]


def _recorded_answer(recorded: records.RecordedAnswer) -> AgentAnswer:
    return AgentAnswer(**_fields_of(recorded, AgentAnswer))


def _fields_of(source: Any, target: type) -> dict[str, Any]:
    """The attributes of `source` that are fields of the attrs class `target`."""
    return {f.name: getattr(source, f.name) for f in attrs.fields(target) if hasattr(source, f.name)}


# --- the agents -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Brief:
    """One OA request: the candidate it shows, what running that gave, what to do, how many sources."""

    subject: Candidate | None
    feedback: str
    instruction: str
    count: int
    show_failures: bool = True
    """Also show the last round's failures (a generate-and-fix lineage sees only its own)."""


class Agents:
    """The three roles over the session's backend, for one run: cached, recorded, retried."""

    def __init__(self, session: Session, *, run_dir: Path, record: Callable[[records.AgentCalled], None]) -> None:
        self.session = session
        self.backend = session.backend
        self.cache = AnswerCache(run_dir / ANSWER_CACHE)
        self.search = session.registries["searches"].get(session.config.run.strategy)()
        self._record = record
        self._record_lock = threading.Lock()
        self.parallel_requests = max(1, int(getattr(self.backend, "parallel_requests", 1)))
        self.candidates_per_request: int | None = getattr(self.backend, "candidates_per_request", None)

    @property
    def plans(self) -> bool:
        """Whether rounds are planned by SSDA and SPA (recorded as `PlanMade`) before generation."""
        return self.search.plans and self.session.config.run.planning

    def generate(self, ctx: PlanningContext, plan: Plan | None, k: int) -> Generation:
        """The round's K sources, written the way the run's strategy writes them."""
        return self.search.generate(self, ctx, plan, k)

    # --- SSDA and SPA ----------------------------------------------------------------------

    def select_space(self, ctx: PlanningContext) -> SpaceDecision:
        """SSDA: choose the space among `ctx.allowed_spaces` and score every direction."""
        directions, knowledge = self.session.directions, self.session.context.knowledge
        spaces = "\n".join(f"- {s.name}: {s.description}" for s in self.session.spaces if s.name in ctx.allowed_spaces)
        rubric = "\n".join(
            f"- {d.name} ({d.title}): {d.description}\n  Rubric: {knowledge[d.name].rubric}" for d in directions.values()
        )
        schema = ssda_schema(ctx.allowed_spaces, list(directions))
        example = {"space": ctx.allowed_spaces[0], "scores": {d: 0.5 for d in directions}, "rationale": "which evidence, which headroom"}
        prompt = _join(
            "You are the Search-Space Decision Agent (SSDA) of HIERA, which optimises one kernel in rounds. Choose where"
            " this round's candidates are searched: one implementation space, and for every optimisation direction a"
            " score in [0, 1] of how much time it could still win, judged from the current best candidate's profile"
            " with each direction's rubric. The top-scored direction is planned and implemented next; a direction"
            " that earlier rounds already tried without gain deserves a lower score.",
            _task_section(ctx),
            _contract_section(ctx),
            _target_section(ctx),
            self._best_section(ctx),
            _failures_section(ctx),
            _decisions_section(ctx),
            _history_section(ctx),
            "# Implementation spaces you may choose (nested: each admits everything of the ones above it)\n" + spaces,
            "# Directions and their rubric\n" + rubric,
            _answer_format(schema, example),
        )

        def parse(answer: AgentAnswer) -> SpaceDecision:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, schema)
            scores = {d: float(data["scores"][d]) for d in directions}
            return SpaceDecision(space=data["space"], scores=scores, rationale=data["rationale"])

        return self._ask(ctx, "ssda", prompt, parse)

    def plan_strategy(self, ctx: PlanningContext, decision: SpaceDecision) -> Strategy:
        """SPA: a concrete strategy for the decided space and its top direction."""
        direction = self.session.directions[decision.direction]
        known = self.session.context.knowledge[decision.direction]
        catalogue = "\n".join(
            f"- {s.name}: " + " ".join(s.steps) + (f" Constraints: {' '.join(s.constraints)}" if s.constraints else "")
            for s in known.strategies_for(self.session.space(decision.space).rank)
        )
        scores = " ".join(f"{d}={s:.2f}" for d, s in decision.scores.items())
        example = {"name": "kebab-case-name", "steps": ["first concrete change", "second"], "constraints": ["what must stay true"]}
        prompt = _join(
            "You are the Strategy Planning Agent (SPA) of HIERA. Turn this round's decision into one concrete strategy:"
            " ordered steps that every candidate of the round implements, and the constraints they must respect."
            " Adapt or combine the known strategies to what the profile shows; stay inside the space.",
            _task_section(ctx),
            _contract_section(ctx),
            _target_section(ctx),
            self._best_section(ctx),
            _failures_section(ctx),
            _decisions_section(ctx),
            f"# Decision\nspace {decision.space}, direction {decision.direction} ({scores}). Rationale: {decision.rationale}",
            f"# Space {decision.space}\n{self.session.space(decision.space).description}",
            f"# Direction {direction.name}: {direction.title}\n{direction.description}\n{known.knowledge}",
            f"# Known strategies for {direction.name} in {decision.space}\n"
            + (catalogue or f"- none known here on '{self.session.context.kind}' architectures: devise one from the profile"),
            _answer_format(SPA_SCHEMA, example),
        )

        def parse(answer: AgentAnswer) -> Strategy:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, SPA_SCHEMA)
            return Strategy(
                space=decision.space,
                direction=decision.direction,
                name=data["name"].strip(),
                steps=list(data["steps"]),
                constraints=list(data["constraints"]),
            )

        return self._ask(ctx, "spa", prompt, parse, decision=decision)

    def judge(self, ctx: PlanningContext, space: str) -> dict[str, Any]:
        """The CudaForge-like judge (asked in the `spa` role): one bottleneck of the best candidate, read
        from its whole profile, and the one method and steps that remove it."""
        example = {"bottleneck": "what limits it, citing metrics", "method": "kebab-case-name", "steps": ["..."], "constraints": ["..."]}
        prompt = _join(
            "You are the judge of a kernel refinement loop. Read the best candidate's measurement and profile and"
            " name exactly one bottleneck, the one optimisation method that removes it, and the steps a coder"
            " follows to apply it. If the last round's candidates failed, say what they got wrong in the steps.",
            _task_section(ctx),
            _contract_section(ctx),
            _target_section(ctx),
            self._best_section(ctx),
            _failures_section(ctx),
            f"# Implementation space\n{self.session.space(space).description}",
            _answer_format(JUDGE_SCHEMA, example),
        )

        def parse(answer: AgentAnswer) -> dict[str, Any]:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, JUDGE_SCHEMA)
            return data

        return self._ask(ctx, "spa", prompt, parse)

    # --- OA ----------------------------------------------------------------------------------

    def split(self, k: int) -> list[int]:
        """How many sources each OA request of a round asks for: the backend's `candidates_per_request`
        each (the last one the rest), or all K in one request."""
        per = self.candidates_per_request or k
        return [min(per, k - start) for start in range(0, k, per)]

    def generate_candidates(
        self, ctx: PlanningContext, briefs: list[Brief], *, space: str, strategy: Strategy | None = None
    ) -> tuple[list[GeneratedSource], list[str]]:
        """OA: one request per brief, up to the backend's `parallel_requests` in flight; the sources in
        brief order, and a note for every brief that produced none."""
        k = sum(b.count for b in briefs)

        def write(sample: int, brief: Brief) -> list[GeneratedSource]:
            prompt = self._oa_prompt(ctx, brief, space=space, sample=sample, requests=len(briefs), k=k)
            parent_id = brief.subject.id if brief.subject else None

            def parse(answer: AgentAnswer) -> list[GeneratedSource]:
                try:
                    data = extract_json(answer.text, complete=not answer.truncated)
                    validate(data, OA_SCHEMA)
                    items = data["candidates"]
                except ValueError as exc:
                    items = [{"source": block} for block in _fenced_sources(answer.text)]
                    if not items:
                        raise ValueError(f"no candidate source in the answer ({exc}); expected the JSON object asked for") from None
                origin = " ".join(filter(None, (self.backend.name, answer.model)))
                return [
                    GeneratedSource(
                        source=_unfence(str(item["source"])),
                        params=dict(item.get("params", {})),
                        origin=str(item.get("origin") or origin),
                        parent_id=item.get("parent_id") or parent_id,
                    )
                    for item in items[: brief.count]
                ]

            return self._ask(ctx, "oa", prompt, parse, sample=sample, candidates=brief.count, strategy=strategy, k=brief.count)

        outcomes = self._in_parallel([lambda i=i, b=b: write(i, b) for i, b in enumerate(briefs)])
        sources, notes = [], []
        for outcome in outcomes:
            if isinstance(outcome, AgentError):
                notes.append(str(outcome))
            else:
                sources += outcome
        return sources, notes

    def _oa_prompt(self, ctx: PlanningContext, brief: Brief, *, space: str, sample: int, requests: int, k: int) -> str:
        filename = ctx.contract.source_filename
        wanted = "one complete version" if brief.count == 1 else f"{brief.count} different complete versions"
        independent = (
            f"\nThis is request {sample + 1} of {requests} for this round's {k} candidates; the others are answered"
            " independently, so make your own choices where the brief leaves room (tile and block sizes, unroll"
            " factors, loop order, vector width)."
            if requests > 1
            else ""
        )
        example = {"candidates": [{"source": f"<the whole of {filename}>"}] * brief.count}
        return _join(
            "You are the Optimization Agent (OA) of HIERA. Write candidate implementations of the contract below,"
            " faster than the candidate shown and exactly as correct.",
            _task_section(ctx),
            _contract_section(ctx),
            _target_section(ctx),
            _subject_section("Starting point", brief.subject, brief.feedback, filename),
            _failures_section(ctx) if brief.show_failures else "",
            f"# What to do\n{brief.instruction}\n\n# Implementation space {space}\n{self.session.space(space).description}",
            f"# Write\n{wanted} of `{filename}`: the whole file, compilable on its own with the frozen files.{independent}",
            _answer_format(OA_SCHEMA, example),
        )

    # --- asking ------------------------------------------------------------------------------

    def _best_section(self, ctx: PlanningContext) -> str:
        summary = profile_summary(ctx.parent_evaluation, self.session.directions)
        return _subject_section("Current best candidate", ctx.parent, summary, ctx.contract.source_filename)

    def _ask(self, ctx: PlanningContext, role: str, prompt: str, parse: Callable[[AgentAnswer], Any], *,
             sample: int = 0, candidates: int = 0, **context: Any) -> Any:
        base = AgentRequest(
            role=role,
            prompt=prompt,
            context={**attrs.asdict(ctx, recurse=False), **context},
            round=ctx.round,
            sample=sample,
            candidates=candidates,
        )
        reask, error = "", None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            request = attrs.evolve(base, prompt=prompt + reask, attempt=attempt)
            started = time.perf_counter()
            answer, cached, error = self._answer(request)
            value = None
            if answer is not None:
                try:
                    value = parse(answer)
                except (ValueError, KeyError, TypeError) as exc:
                    cut = "the answer was cut off at the output-token limit; " if answer.truncated else ""
                    error = f"unusable answer: {cut}{exc}"
                    reask = (
                        f"\n\n# Your previous answer (attempt {attempt}) was unusable\n{cut}{exc}\nIt began:\n"
                        f"{answer.text[:400]}\n\nAnswer again, exactly in the format asked for"
                        f"{' and more briefly' if cut else ''}."
                    )
            self._note(request, answer, cached=cached, error=error, wall_s=time.perf_counter() - started)
            if error is None:
                return value
            log.warning("agent_answer_rejected", role=role, sample=sample, attempt=attempt, error=error)
        where = f"{role} request {sample + 1}" if role == "oa" else role
        raise AgentError(f"{where}: no usable answer after {MAX_ATTEMPTS} attempts (last: {error})")

    def _answer(self, request: AgentRequest) -> tuple[AgentAnswer | None, bool, str | None]:
        """(answer, served from the cache, why there is none)."""
        recorded = self.cache.get(request)
        if recorded is not None:
            return _recorded_answer(recorded), True, None
        try:
            answer = self.backend.answer(request)
        except BackendError as exc:
            return None, False, f"backend {self.backend.name}: {exc}"
        except Exception as exc:  # a bug, not an answer that could not be had: asking again cannot help
            log.exception("backend_failed", backend=self.backend.name, role=request.role)
            raise PluginError(
                f"backend '{self.backend.name}' failed on round {request.round}'s {request.role} request: {one_line(exc)}"
            ) from exc
        self.cache.put(request, answer, self.backend.name)
        return answer, False, None

    def _note(self, request: AgentRequest, answer: AgentAnswer | None, *, cached: bool, error: str | None, wall_s: float) -> None:
        event = records.AgentCalled(
            round=request.round,
            role=request.role,
            sample=request.sample,
            attempt=request.attempt,
            backend=self.backend.name,
            model=answer.model if answer else "",
            input_tokens=answer.input_tokens if answer else 0,
            output_tokens=answer.output_tokens if answer else 0,
            cost_usd=answer.cost_usd if answer else None,
            wall_s=round(wall_s, 4),
            cached=cached,
            error=error,
        )
        with self._record_lock:
            self._record(event)

    def _in_parallel(self, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run `calls` with up to `parallel_requests` in flight; each result, or its AgentError, in order.
        Daemon threads, so that Ctrl-C ends a run even while a backend waits (a person, a slow service)."""
        results: list[Any] = [None] * len(calls)
        slots = threading.Semaphore(self.parallel_requests)

        def run(i: int, context: contextvars.Context) -> None:
            with slots:
                try:
                    results[i] = context.run(calls[i])
                except Exception as exc:  # AgentError is a result; anything else is re-raised below
                    results[i] = exc

        threads = [threading.Thread(target=run, args=(i, contextvars.copy_context()), daemon=True) for i in range(len(calls))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, AgentError):
                raise result
        return results
