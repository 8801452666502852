"""The prompts of the three roles (and of the CudaForge-like judge), built from sections: the task, the
frozen contract, the target, the candidate shown and what running it gave, the run's history, the spaces
and the directions with the architecture's knowledge of them, and the answer format. The knowledge they
quote belongs to the plugins that own it (a direction's description, the architecture's knowledge,
rubric and strategies of it, what each space admits on the architecture, the architecture's hardware, peaks and
toolchain, a workload's contract)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hiera_core.agents.answers import JUDGE_SCHEMA, OA_SCHEMA, SPA_SCHEMA
from hiera_core.agents.context import Brief, PlanningContext
from hiera_core.agents.feedback import execution_feedback, outcome, profile_summary
from hiera_core.records import Candidate, Evaluation, Measured, SpaceDecision, beats

if TYPE_CHECKING:
    from hiera_core.session import Session

FILE_LIMIT = 4000
"""Characters of one frozen contract file quoted in a prompt."""
FENCE_LANGUAGE = {".c": "c", ".h": "c", ".cu": "cuda", ".cpp": "cpp", ".py": "python", ".json": "json"}
REPAIR_HEADING = "Failed candidate to repair"
"""The heading under which an OA repair request shows the failed candidate."""


def _fence(text: str, filename: str) -> str:
    return f"```{FENCE_LANGUAGE.get(Path(filename).suffix, '')}\n{text.rstrip()}\n```"


def _task_section(ctx: PlanningContext) -> str:
    inputs = f"\n## Inputs\n{ctx.inputs}" if ctx.inputs else ""
    return f"# Task: {ctx.task.name} ({ctx.task.workload}), round {ctx.round}\n{ctx.task.description}{inputs}"


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


def _target_section(session: Session, ctx: PlanningContext) -> str:
    peaks = _peaks(ctx, session.config.run.floor_margin)
    lines = [
        f"# Target\nArchitecture `{ctx.arch}`.",
        session.context.hardware,
        peaks,
        f"The file is built with {built_with(ctx.toolchain)}.",
    ]
    return "\n".join(line for line in lines if line)


def built_with(toolchain: dict[str, Any]) -> str:
    """The toolchain as the prompts state it: what a file is built with (versions, flags), not where things lie on this
    machine. Paths (a cache folder, an install root, include folders) tell a model nothing it can use, and a prompt
    leaves the machine for the model's provider: a value or a list's item that names a path (`/opt/...`, `-I/usr/...`,
    `--flag=~/...`) is left out, and so is what is empty or unknown ("None")."""

    def shown(value: Any) -> bool:
        return value not in ("", [], None, "None") and not (isinstance(value, str) and PATH_IN_TEXT.search(value))

    kept = {k: [x for x in v if shown(x)] if isinstance(v, list) else v for k, v in toolchain.items()}
    return "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in kept.items() if shown(v))


PATH_IN_TEXT = re.compile(r"(^|[\s=:,]|^-\w)[/~]")
"""Where a text names a path of this machine: `/` or `~` at its start, after a space, `=`, `:` or `,`, or after a
one-letter flag (`-I/usr/include`)."""


def _peaks(ctx: PlanningContext, margin: float) -> str:
    """The measured peaks and the floors they set: a time below `margin` of the larger floor is rejected."""
    roofline = ctx.roofline
    if roofline is None:
        return ""
    dtype = ctx.task.params.get("dtype", "float64")
    work = f"at least {figure(roofline.bytes_moved / 1e6)} MB moved"
    floors = f"{roofline.memory_floor_ms:.3g} ms for memory"
    if roofline.flops:
        work += f" and {figure(roofline.flops / 1e9)} GFLOP computed"
        floors += f", {roofline.compute_floor_ms:.3g} ms for arithmetic"
    text = (
        f"Measured on this machine: {figure(roofline.peak_gbps)} GB/s memory bandwidth, {figure(roofline.peak_gflops)}"
        f" GFLOP/s in {dtype}. One call of this task has {work}, so its floors are {floors}; a time below"
        f" {margin:.0%} of the larger floor is rejected as impossible."
    )
    if roofline.reference_flops:
        text += (
            f" The reference itself computes {figure(roofline.reference_flops / 1e9)} GFLOP (PyTorch's FLOP counter:"
            f" matrix products and convolutions), {roofline.compute_headroom_ms:.3g} ms at that rate: a candidate doing"
            " the same arithmetic cannot be faster; one that needs less (a reduction folded into a smaller product) can."
        )
    return text


def figure(value: float) -> str:
    """A measured figure as a prompt prints it: whole above a thousand (`60,000`), else four significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


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
        text = execution_feedback(evaluation, candidate.source, ctx.contract.source_filename) if i < 3 else outcome(evaluation)
        lines.append(f"- `{candidate.id}` ({candidate.strategy or '-'}): {text}")
    return "\n".join(lines)


def _decisions_section(ctx: PlanningContext) -> str:
    if not ctx.plans:
        return ""
    lines = ["# Decisions so far (a gain counts only beyond the noise of the two figures: their spreads over their timed calls)"]
    for plan in ctx.plans:
        scores = " ".join(f"{d}={s:.2f}" for d, s in plan.decision.scores.items())
        results = [e for c, e in ctx.history if c.round == plan.round and isinstance(e, Measured)]
        before = [e for c, e in ctx.history if c.round < plan.round and isinstance(e, Measured)]
        evaluated = sum(1 for c, _ in ctx.history if c.round == plan.round)
        best = "no valid candidate"
        if results:
            top, incumbent = min(results, key=lambda e: e.latency_ms), min(before, key=lambda e: e.latency_ms, default=None)
            gain = (
                ""
                if incumbent is None
                else f", {incumbent.latency_ms / top.latency_ms:.3f}x the best before it: "
                + ("a gain" if beats(top, incumbent) else "no gain beyond the noise")
            )
            best = f"round best {top.latency_ms:.4g} ms{gain}"
        lines.append(
            f"- round {plan.round}: space {plan.decision.space}, direction {plan.decision.direction} ({scores}),"
            f" strategy {plan.strategy.name}: {len(results)}/{evaluated} valid, {best}"
        )
    return "\n".join(lines)


def _history_section(ctx: PlanningContext, limit: int = 12, *, space: str | None = None) -> str:
    """The last `limit` candidates, each with its result; with `space`, only those written for that space."""
    history = [(c, e) for c, e in ctx.history if space is None or c.space == space]
    rows = [
        f"- `{c.id}` round {c.round} {c.space} {c.direction or '-'} {c.strategy or 'initial'}: {_measured_briefly(e)}"
        for c, e in history[-limit:]
    ]
    title = "Candidates so far" if space is None else f"Tried so far in {space} (do not write one of these again)"
    return (
        f"# {title} (latest last)\nEach: the median latency with the p10 and p90 of its timed calls, the"
        " speedup over the reference, and its weakest profile signals (1 = healthy), or why it failed.\n"
        + ("\n".join(rows) or "- none")
    )


def _measured_briefly(evaluation: Evaluation, signals: int = 3) -> str:
    """One line of a candidate's result: its spread and short profile when measured, else its failure."""
    if not isinstance(evaluation, Measured):
        return outcome(evaluation)
    line = (
        f"{evaluation.latency_ms:.4g} ms (p10 {evaluation.latency_p10_ms:.4g}, p90 {evaluation.latency_p90_ms:.4g}),"
        f" {evaluation.speedup_vs_reference:.2f}x the reference"
    )
    if evaluation.disturbed:
        line += " (timed while the machine was busy: may read slow)"
    profile = evaluation.profile
    if profile is not None and profile.signals:
        weakest = sorted(profile.signals.items(), key=lambda item: (item[1], item[0]))[:signals]
        line += "; weakest signals: " + ", ".join(f"{name} {value:.2f}" for name, value in weakest)
    return line


def _join(*sections: str) -> str:
    return "\n\n".join(s for s in sections if s)


def _answer_format(schema: dict[str, Any], example: dict[str, Any]) -> str:
    return (
        "# Answer\nOne JSON object that follows this JSON schema, and nothing else:\n"
        f"{json.dumps(schema)}\nFor example:\n{json.dumps(example)}"
    )


def _best_section(session: Session, ctx: PlanningContext) -> str:
    summary = profile_summary(ctx.parent_evaluation, session.directions)
    return _subject_section("Current best candidate", ctx.parent, summary, ctx.contract.source_filename)


def _situation(session: Session, ctx: PlanningContext, *, decisions: bool) -> str:
    """What a planning role reads first: the task, the contract, the target, the current best candidate, the
    last round's failures and (`decisions`) the earlier rounds' decisions."""
    return _join(
        _task_section(ctx),
        _contract_section(ctx),
        _target_section(session, ctx),
        _best_section(session, ctx),
        _failures_section(ctx),
        _decisions_section(ctx) if decisions else "",
    )


# --- the roles' prompts -----------------------------------------------------------------------


def ssda(session: Session, ctx: PlanningContext, schema: dict[str, Any]) -> str:
    """SSDA: choose the space among `ctx.allowed_spaces` and score every direction."""
    directions, knowledge = session.directions, session.context.knowledge
    rules = session.context.space_rules
    spaces = "\n".join(f"- {s.name}: {rules[s.name]}" for s in session.spaces if s.name in ctx.allowed_spaces)
    rubric = "\n".join(
        f"- {d.name} ({knowledge[d.name].title or d.title}): {d.description}\n  Rubric: {knowledge[d.name].rubric}"
        for d in directions.values()
    )
    example = {
        "space": ctx.allowed_spaces[0],
        "scores": {d: 0.5 for d in directions},
        "rationale": "which evidence, which headroom",
    }
    return _join(
        "You are the Search-Space Decision Agent (SSDA) of HIERA, which optimises one kernel in rounds. Choose where"
        " this round's candidates are searched: one implementation space, and for every optimisation direction a"
        " score in [0, 1] of how much time it could still win, judged from the current best candidate's profile"
        " with each direction's rubric. The top-scored direction is planned and implemented next; a direction"
        " that earlier rounds already tried without gain deserves a lower score.",
        _situation(session, ctx, decisions=True),
        _history_section(ctx),
        "# Implementation spaces you may choose (nested: each admits everything of the ones above it)\n" + spaces,
        "# Directions and their rubric\n" + rubric,
        _answer_format(schema, example),
    )


def spa(session: Session, ctx: PlanningContext, decision: SpaceDecision) -> str:
    """SPA: a concrete strategy for the decided space and its top direction."""
    direction = session.directions[decision.direction]
    known = session.context.knowledge[decision.direction]
    catalogue = "\n".join(
        f"- {s.name}: " + " ".join(s.steps) + (f" Constraints: {' '.join(s.constraints)}" if s.constraints else "")
        for s in known.strategies_for(session.space(decision.space).rank)
    )
    scores = " ".join(f"{d}={s:.2f}" for d, s in decision.scores.items())
    example = {"name": "kebab-case-name", "steps": ["first concrete change", "second"], "constraints": ["what must stay true"]}
    return _join(
        "You are the Strategy Planning Agent (SPA) of HIERA. Turn this round's decision into one concrete strategy:"
        " ordered steps that every candidate of the round implements, and the constraints they must respect."
        " Adapt or combine the known strategies to what the profile shows; stay inside the space.",
        _situation(session, ctx, decisions=True),
        f"# Decision\nspace {decision.space}, direction {decision.direction} ({scores}). Rationale: {decision.rationale}",
        f"# Implementation space {decision.space}\n{session.context.space_rules[decision.space]}",
        f"# Direction {direction.name}: {known.title or direction.title}\n{direction.description}\n{known.knowledge}",
        f"# Known strategies for {direction.name} in {decision.space}\n"
        + (catalogue or f"- none known here on '{session.context.kind}' architectures: devise one from the profile"),
        _answer_format(SPA_SCHEMA, example),
    )


def judge(session: Session, ctx: PlanningContext, space: str) -> str:
    """The CudaForge-like judge: one bottleneck of the best candidate and the one method that removes it."""
    example = {
        "bottleneck": "what limits it, citing metrics",
        "method": "kebab-case-name",
        "steps": ["..."],
        "constraints": ["..."],
    }
    return _join(
        "You are the judge of a kernel refinement loop. Read the best candidate's measurement and profile and"
        " name exactly one bottleneck, the one optimisation method that removes it, and the steps a coder"
        " follows to apply it. If the last round's candidates failed, say what they got wrong in the steps.",
        _situation(session, ctx, decisions=False),
        f"# Implementation space {space}\n{session.context.space_rules[space]}",
        _answer_format(JUDGE_SCHEMA, example),
    )


def oa(session: Session, ctx: PlanningContext, brief: Brief, *, space: str, sample: int, requests: int, k: int) -> str:
    """OA: `brief.count` complete sources of the contract's file, in `space`."""
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
    role = (
        "You are the Optimization Agent (OA) of HIERA. Repair the candidate implementation of the contract below,"
        " which failed: find the cause of its failure in its source and fix it, keeping what makes it fast."
        if brief.repair
        else "You are the Optimization Agent (OA) of HIERA. Write candidate implementations of the contract below,"
        " faster than the candidate shown and exactly as correct."
    )
    return _join(
        role,
        _task_section(ctx),
        _contract_section(ctx),
        _target_section(session, ctx),
        _subject_section(REPAIR_HEADING if brief.repair else "Starting point", brief.subject, brief.feedback, filename),
        _failures_section(ctx) if brief.show_failures else "",
        _history_section(ctx, 8, space=space) if brief.show_history and not brief.repair else "",
        f"# What to do\n{brief.instruction}\n\n# Implementation space {space}\n{session.context.space_rules[space]}",
        f"# Write\n{wanted} of `{filename}`: the whole file, compilable on its own with the frozen files.{independent}",
        _answer_format(OA_SCHEMA, example),
    )
