"""The search strategies: how a round's candidates are written (`[run] strategy`, `--strategy NAME`).

`hiera` is the paper's loop; `caesar` and `cudaforge` are the two baselines of its comparison. Each asks
the run's agents (`hiera_core.agents.Agents`) for the round's sources its own way.
"""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl
from hiera_core.agents import AgentError, Agents, Brief, Generation, PlanningContext, execution_feedback, profile_summary
from hiera_core.records import Candidate, CompileFailed, Crashed, Evaluation, Incorrect, Plan


class HieraSearch:
    """The paper's loop: SSDA and SPA plan the round, OA implements the strategy from the best candidate.
    Without planning (the paper's ablation), OA alone, with one generic prompt, in the widest space.
    When the round continues the strategy of a candidate that failed, one of its K requests is that
    candidate's repair (`repair_target`)."""

    name: ClassVar[str] = "hiera"
    plans: ClassVar[bool] = True

    def generate(self, agents: Agents, ctx: PlanningContext, plan: Plan | None, k: int) -> Generation:
        feedback = profile_summary(ctx.parent_evaluation, agents.session.directions)
        if plan is None:
            space, direction, name, strategy = ctx.allowed_spaces[-1], None, "unconstrained", None
            instruction = "Make the starting point faster, any way you see fit within the contract and the space."
        else:
            strategy = plan.strategy
            space, direction, name = strategy.space, strategy.direction, strategy.name
            instruction = (
                f"Apply strategy `{strategy.name}` (direction {strategy.direction}):\n"
                + "\n".join(f"{i}. {step}" for i, step in enumerate(strategy.steps, 1))
                + ("\nConstraints:\n" + "\n".join(f"- {c}" for c in strategy.constraints) if strategy.constraints else "")
            )
        repair = repair_target(agents, ctx, plan, k)
        briefs = [
            Brief(subject=ctx.parent, feedback=feedback, instruction=instruction, count=n)
            for n in agents.split(k - 1 if repair else k)
        ]
        if repair:
            failed, failure = repair
            briefs.append(
                Brief(
                    subject=failed,
                    feedback=execution_feedback(failure, failed.source, ctx.contract.source_filename),
                    instruction=f"{REPAIR_INSTRUCTION}\n\nIt implements the strategy that this round continues:\n{instruction}",
                    count=1,
                    show_failures=False,
                    repair=True,
                )
            )
        sources, notes = agents.generate_candidates(ctx, briefs, space=space, strategy=strategy)
        return Generation(sources=sources, space=space, direction=direction, strategy=name, notes=notes)


REPAIRABLE = (CompileFailed, Crashed, Incorrect)
"""The failures a repair is asked for: a bug its source shows. A time-out may be a correct but slow candidate;
a static rejection or an impossible measurement breaks a rule, which a fix would only hide."""
REPAIR_INSTRUCTION = (
    "Find why it failed (what running it gave, above) and fix that in its source. Keep its approach where it is"
    " sound: the repaired version must be exactly as correct as the reference and as fast as it was meant to be."
)


def repair_target(agents: Agents, ctx: PlanningContext, plan: Plan | None, k: int) -> tuple[Candidate, Evaluation] | None:
    """The failed candidate that one of this round's K requests asks to fix, or None. The rule: K is at least 2
    (one request stays with the best candidate), the backend can repair (`repairs`), the round continues the
    last round's strategy (the plan keeps that round's space and direction, or there is no planning: every
    round is `unconstrained`), and a candidate of the last round crashed, computed a wrong answer or did not
    compile: the first of them in the order they were written."""
    if k < 2 or ctx.round < 2 or not agents.repairs:
        return None
    if plan is not None:
        last = next((p for p in ctx.plans if p.round == ctx.round - 1), None)
        if last is None or (last.strategy.space, last.strategy.direction) != (plan.strategy.space, plan.strategy.direction):
            return None
    return next(((c, e) for c, e in ctx.history if c.round == ctx.round - 1 and isinstance(e, REPAIRABLE)), None)


class CaesarSearch:
    """KernelBench-Caesar-like generate-and-fix: K lineages, each continued from its own last candidate
    (lineage i from the i-th candidate of the last round; the best so far where that is missing) and
    shown only what running it gave: compiler log, wrong output, crash, or latency. No profile, no
    planning, the widest space."""

    name: ClassVar[str] = "caesar"
    plans: ClassVar[bool] = False

    def generate(self, agents: Agents, ctx: PlanningContext, plan: Plan | None, k: int) -> Generation:
        evaluated = dict((c.id, e) for c, e in ctx.history)
        last = [c for c, _ in ctx.history if c.round == ctx.round - 1]
        fallback = ctx.parent or (last[0] if last else None)
        tips = [last[i] if i < len(last) else fallback for i in range(k)]
        instruction = "If it failed, fix it; if it is correct, make it faster. Keep it exactly as correct."
        briefs = [
            Brief(
                subject=tip,
                feedback=execution_feedback(evaluated[tip.id], tip.source, ctx.contract.source_filename)
                if tip
                else "not run yet",
                instruction=instruction,
                count=1,
                show_failures=False,
                show_history=False,
            )
            for tip in tips
        ]
        space = ctx.allowed_spaces[-1]
        sources, notes = agents.generate_candidates(ctx, briefs, space=space)
        return Generation(sources=sources, space=space, direction=None, strategy="generate-and-fix", notes=notes)


class CudaForgeSearch:
    """CudaForge-like refinement: a judge reads the best candidate's whole profile and the last round's
    failures and names one bottleneck and one method; OA writes the K candidates from the best, in the
    most controlled allowed space (pure CUDA unless the run fixes another)."""

    name: ClassVar[str] = "cudaforge"
    plans: ClassVar[bool] = False

    def generate(self, agents: Agents, ctx: PlanningContext, plan: Plan | None, k: int) -> Generation:
        space = ctx.allowed_spaces[0]
        try:
            verdict = agents.judge(ctx, space)
        except AgentError as exc:
            return Generation(sources=[], space=space, direction=None, strategy="judge", notes=[str(exc)])
        instruction = (
            f"Remove this bottleneck: {verdict['bottleneck']}\nMethod `{verdict['method']}`:\n"
            + "\n".join(f"{i}. {step}" for i, step in enumerate(verdict["steps"], 1))
            + "".join(f"\n- {c}" for c in verdict.get("constraints", []))
        )
        feedback = profile_summary(ctx.parent_evaluation, agents.session.directions)
        briefs = [Brief(subject=ctx.parent, feedback=feedback, instruction=instruction, count=n) for n in agents.split(k)]
        sources, notes = agents.generate_candidates(ctx, briefs, space=space)
        note = f"judge: {verdict['bottleneck'][:200]} -> {verdict['method']}"
        return Generation(sources=sources, space=space, direction=None, strategy=str(verdict["method"]), notes=[note, *notes])


@hookimpl
def hiera_register_searches() -> list[type]:
    return [HieraSearch, CaesarSearch, CudaForgeSearch]


@hookimpl
def hiera_run_defaults() -> dict[str, str]:
    return {"strategy": HieraSearch.name}
