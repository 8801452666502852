"""Algorithm 1 of the paper: the initial candidate, then rounds of plan, generate and evaluate.

Everything the engine decides or measures is appended to the trajectory before it is used, so a run
killed at any point resumes by replaying the trajectory: a recorded plan, generated batch or
evaluation is read back, never redone.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import pluggy
import structlog

from hiera_core import agents, baseline_cache, peaks, protocols, records
from hiera_core.config import ConfigError
from hiera_core.pipeline import SPACE_CHECK, Evaluated
from hiera_core.plugins import PluginError, collect
from hiera_core.protocols import AnswerPending, EvalJob, NoSeed, StagePassed
from hiera_core.records import Candidate, Evaluation, Measured
from hiera_core.report import write_report
from hiera_core.serialization import evaluation_to_json
from hiera_core.session import TABLE_KIND, Session
from hiera_core.store import RunStore, new_run_id, write_text_atomic
from hiera_judge import sandbox

log = structlog.get_logger(__name__)


def create_run(session: Session, run_dir: Path | None = None) -> RunStore:
    """Make a new run directory with its manifest; a task the workload has no contract for on the session's
    architecture raises UnsupportedArchitecture first, and nothing is written."""
    session.workload.contract(session.task, session.arch_kind)
    run_id = new_run_id()
    path = run_dir or Path(session.config.run.run_dir or Path("runs") / run_id)
    manifest = records.RunManifest(
        run_id=run_id,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        config=session.config.table(),
        versions=session.config.versions,
        hardware=session.arch.hardware(),
        task=session.task,
        protection=sandbox.protection(),
    )
    return RunStore.create(path, manifest)


def tables_in_use(table: Mapping[str, Any], store: RunStore, pm: pluggy.PluginManager) -> dict[str, Any]:
    """A recorded run's configuration `table` (its manifest's, for resuming or replaying it) for the plugins installed
    now. What the run uses must still be there: the plugins its `[run]` names and the evaluators that evaluated its
    candidates (a missing one is a PluginError naming it). The table of any other plugin that is gone is dropped."""
    run = table.get("run", {})
    used = {key: {run[key]} for key in ("workload", "arch", "backend", "executor") if run.get(key)}
    used["evaluator"] = {stage for event in store.events for stage in _stages(event)} - {SPACE_CHECK}
    kept = {key: value for key, value in table.items() if key not in TABLE_KIND}
    for key, kind in TABLE_KIND.items():
        installed = collect(pm, kind).classes
        missing = sorted(used.get(key, set()) - set(installed))
        if missing:
            raise PluginError(
                f"{store.path}: the run used {key} '{missing[0]}', which no installed plugin provides now"
                f" (installed: {', '.join(sorted(installed)) or 'none'})"
            )
        kept[key] = {name: values for name, values in table.get(key, {}).items() if name in installed}
    return kept


def _stages(event: records.Event) -> list[str]:
    """The evaluator stages an event says ran (or hold the device)."""
    if isinstance(event, records.CandidateEvaluated):
        return list(event.stage_s)
    if isinstance(event, records.Remeasured | records.CandidateProfiled):
        return list(event.stage_s)
    if isinstance(event, records.RunFinished):
        return list(event.remeasure_stage_s)
    if isinstance(event, records.RunStarted):
        return list(event.device_stages)
    return []


def check_replayable(store: RunStore, pm: pluggy.PluginManager) -> None:
    """A recorded run replays only with the directions its plans scored: each recorded space decision scores
    those and no other, so with one installed since (or one gone) no recorded answer is usable and every round's
    planning would fail. Raise a PluginError saying which, and which plugin to leave out."""
    scored = {d for event in store.events if isinstance(event, records.PlanMade) for d in event.plan.decision.scores}
    if not scored:  # nothing was planned (--no-planning, a baseline, no round): no recorded answer scores directions
        return
    installed = set(collect(pm, "directions").names())
    if installed - scored:
        added = sorted(installed - scored)
        plugins = sorted(
            {
                impl.plugin_name
                for impl in pm.hook.hiera_register_directions.get_hookimpls()
                if any(cls.name in added for cls in cast(list[type[Any]], impl.function() or ()))
            }
        )
        raise PluginError(
            f"{store.path} cannot be replayed with direction(s) {', '.join(added)}: its plans scored only"
            f" {', '.join(sorted(scored))}, and no recorded answer scores the others; replay it without"
            f" them: HIERA_DISABLE_PLUGINS={','.join(plugins)}"
        )
    if scored - installed:
        raise PluginError(
            f"{store.path} cannot be replayed: its plans scored direction(s)"
            f" {', '.join(sorted(scored - installed))}, which no installed plugin provides now"
        )


class DeviceWanted(Exception):
    """A run resumed where its device is missing has reached a step that needs it: the message says which."""


class Engine:
    """Runs (or resumes) one optimization of one task, writing everything to a RunStore."""

    def __init__(self, session: Session, store: RunStore, *, device_missing: str = ""):
        """`device_missing`: why the architecture cannot run here (a run resumed on a planning machine): what needs no
        device goes on, from the toolchain the run recorded, and the first evaluation stops it (`DeviceWanted`)."""
        self.session = session
        self.store = store
        self.device_missing = device_missing
        self.run = session.config.run
        self.contract = session.workload.contract(session.task, session.arch_kind)
        if not self.run.contract:
            self.contract = self.contract.without_binding()
        describe_inputs = protocols.optional(session.workload, "inputs")
        self.inputs = describe_inputs(session.task, session.arch_kind) if describe_inputs else ""
        self.toolchain = session.arch.toolchain()
        started = next((e for e in store.events if isinstance(e, records.RunStarted)), None)
        if device_missing and started and started.toolchain:  # the device's, in this machine's order (the prompts list it)
            order = {key: i for i, key in enumerate(self.toolchain)}
            self.toolchain = dict(sorted(started.toolchain.items(), key=lambda item: order.get(item[0], len(order))))
        self.history: list[tuple[Candidate, Evaluation]] = []
        self.recorded = store.evaluated()
        self.profiled = {e.candidate_id: e for e in store.events if isinstance(e, records.CandidateProfiled)}
        self.roofline: records.Roofline | None = None
        self.round = 0
        self.agents = agents.Agents(session, run_dir=store.path, record=store.append, recorded=store.events)

    # --- the loop --------------------------------------------------------------------------

    def optimize(self) -> Candidate | None:
        """Run (or resume) the search to its end, holding the run directory against a second optimizer. When the
        backend will answer later (AnswerPending), the pause is recorded and the exception passes on: everything
        done so far is in the run directory, and resuming it goes on from there."""
        self.store.lock()
        try:
            return self._optimize()
        except AnswerPending as exc:
            log.info("run_paused", round=self.round, waiting=exc.waiting)
            self.store.append(records.RunPaused(round=self.round, waiting=exc.waiting, reason=str(exc)))
            raise
        except DeviceWanted as exc:
            log.info("run_paused", round=self.round, device=str(exc))
            self.store.append(records.RunPaused(round=self.round, waiting=0, reason=str(exc)))
            raise
        finally:
            self.store.unlock()

    def _optimize(self) -> Candidate | None:
        session, hook = self.session, self.session.pm.hook
        structlog.contextvars.bind_contextvars(run_id=self.store.manifest.run_id, task=session.task.name)
        self.roofline = self._roofline()
        hook.hiera_run_started(context=session.context, manifest=self.store.manifest, run_dir=self.store.path)
        baselines = self._baseline_jobs() if self.run.baselines else []
        beside = self.session.pipeline.accelerator is not None and not self.device_missing
        with self._beside_the_search(baselines if beside else []):
            self._evaluate_round(0, self._generated(0, self._seed_batch), baselines=[] if beside else baselines)
            too_large = next((e for _, e in self.history if isinstance(e, records.Crashed) and e.task_too_large), None)
            if too_large is not None:
                log.error("task_too_large", reason=too_large.reason)  # no candidate of it can be judged on this device
            for round_ in range(1, 0 if too_large else self.run.rounds + 1):
                self.round = round_
                structlog.contextvars.bind_contextvars(round=round_)
                self._profile_parents()
                ctx = self._context(round_)
                plan = self._plan(ctx) if self.agents.plans else None
                if plan is not None and plan.decision.exhausted:
                    self._generated(round_, functools.partial(_nothing_left, round_, plan))
                    break
                batch = self._generated(round_, functools.partial(self._generate, ctx, plan))
                self._evaluate_round(round_, batch)

        best = self._finish()
        write_report(self.store)
        hook.hiera_run_finished(context=session.context, run_dir=self.store.path, best=best)
        structlog.contextvars.unbind_contextvars("run_id", "task", "round")
        return best

    def _roofline(self) -> records.Roofline | None:
        for event in self.store.events:
            if isinstance(event, records.RunStarted):
                return event.roofline
        if self.device_missing:
            raise DeviceWanted(f"the run has not started, and starting it needs the device ({self.device_missing})")
        roofline = roofline_for(self.session)
        device_stages = [e.name for e in self.session.evaluators if protocols.optional(e, "holds_device")]
        self.store.append(
            records.RunStarted(
                run_id=self.store.manifest.run_id, roofline=roofline, device_stages=device_stages, toolchain=self.toolchain
            )
        )
        return roofline

    def _evaluated(self, jobs: list[EvalJob], what: str) -> Iterator[tuple[EvalJob, Evaluated]]:
        """The executor's results for `jobs` (`what` they are, for the pause's message), in the order it yields them;
        where the device is missing, a pause instead (`DeviceWanted`), before anything is evaluated."""
        if jobs and self.device_missing:
            raise DeviceWanted(f"{len(jobs)} {what} to evaluate on the device ({self.device_missing})")
        return self.session.executor.run(jobs, self.session.pipeline)

    def best(self) -> Candidate | None:
        ranked = self.parents(1)
        return ranked[0] if ranked else None

    def parents(self, n: int) -> list[Candidate]:
        """The n best valid candidates so far, the incumbent first (`records.ranked`); invalid candidates never compete
        (Eq. 2)."""
        return records.ranked([(c, e) for c, e in self.history if isinstance(e, Measured)], n)

    def _evaluation_of(self, candidate: Candidate | None) -> Evaluation | None:
        for c, e in self.history:
            if candidate is not None and c.id == candidate.id:
                return e
        return None

    # --- planning and generation -------------------------------------------------------------

    def _context(self, round_: int) -> agents.PlanningContext:
        parents = self.parents(self.run.parents)
        parent = parents[0] if parents else None
        return agents.PlanningContext(
            round=round_,
            task=self.session.task,
            arch=self.session.arch_name,
            kind=self.session.arch_kind,
            contract=self.contract,
            toolchain=self.toolchain,
            parent=parent,
            parent_evaluation=self._evaluation_of(parent),
            parents=parents,
            history=list(self.history),
            plans=[e.plan for e in self.store.events if isinstance(e, records.PlanMade)],
            allowed_spaces=self.session.allowed_spaces(),
            planning=self.run.planning,
            inputs=self.inputs,
            roofline=self.roofline,
        )

    def _plan(self, ctx: agents.PlanningContext) -> records.Plan | None:
        for event in self.store.events:
            if isinstance(event, records.PlanMade) and event.plan.round == ctx.round:
                return event.plan
        if any(isinstance(e, records.CandidatesGenerated) and e.round == ctx.round for e in self.store.events):
            return None  # planning failed in the killed run; its note is in the generated batch
        try:
            decision = self.agents.select_space(ctx)
            strategy = self.agents.plan_strategy(ctx, decision)
        except agents.AgentError as exc:
            log.error("planning_failed", error=str(exc))
            self.store.append(records.CandidatesGenerated(round=ctx.round, candidates=[], notes=[str(exc)]))
            return None
        plan = records.Plan(
            round=ctx.round, decision=decision, strategy=strategy, parent_id=ctx.parent.id if ctx.parent else None
        )
        self.store.append(records.PlanMade(plan=plan))
        self.session.pm.hook.hiera_plan_made(context=self.session.context, plan=plan)
        return plan

    def _generated(self, round_: int, generate) -> records.CandidatesGenerated:
        for event in self.store.events:
            if isinstance(event, records.CandidatesGenerated) and event.round == round_:
                return event
        batch = generate()
        self.store.append(batch)
        return batch

    def _seed_batch(self) -> records.CandidatesGenerated:
        try:
            source, params, origin = self.session.workload.seed(self.session.task, self.session.arch_kind)
        except NoSeed as exc:
            return records.CandidatesGenerated(round=0, candidates=[], notes=[f"no initial candidate: {exc}"])
        # The most controlled allowed space that admits the seed (an ATen translation is not pure CUDA);
        # if none does, the widest, whose check then says why the seed is not admitted.
        allowed = self.session.allowed_spaces()
        arch = self.session.arch
        space = next((s for s in allowed if arch.check_source(source, self.session.space(s).rank) is None), allowed[-1])
        seed = self._candidate(agents.GeneratedSource(source=source, params=dict(params), origin=origin), round_=0, space=space)
        return records.CandidatesGenerated(round=0, candidates=[seed])

    def _generate(self, ctx: agents.PlanningContext, plan: records.Plan | None) -> records.CandidatesGenerated:
        if self.agents.plans and plan is None:
            return records.CandidatesGenerated(round=ctx.round, candidates=[], notes=["no plan for this round"])
        started = time.perf_counter()
        generation = self.agents.generate(ctx, plan, self.run.population)
        seen = {c.id for c, _ in self.history}
        candidates, notes = [], list(generation.notes)
        for generated in generation.sources:
            candidate = self._candidate(
                generated, round_=ctx.round, space=generation.space, direction=generation.direction, strategy=generation.strategy
            )
            if candidate.id in seen:
                notes.append(f"duplicate of an earlier candidate {candidate.id} ({generated.origin}); dropped")
                continue
            seen.add(candidate.id)
            candidates.append(candidate)
        if len(candidates) < self.run.population:
            notes.append(f"{len(candidates)} new candidates of {self.run.population} requested")
        wall_s = round(time.perf_counter() - started, 4)
        return records.CandidatesGenerated(round=ctx.round, candidates=candidates, notes=notes, wall_s=wall_s)

    def _candidate(
        self,
        generated: agents.GeneratedSource,
        *,
        round_: int,
        space: str,
        direction: str | None = None,
        strategy: str | None = None,
    ) -> Candidate:
        return Candidate(
            id=candidate_id(generated.source, self.contract, self.toolchain),
            source=generated.source,
            space=space,
            round=round_,
            direction=direction,
            strategy=strategy,
            parent_id=generated.parent_id,
            origin=generated.origin,
            params=generated.params,
        )

    # --- evaluation ------------------------------------------------------------------------

    def _evaluate_round(
        self, round_: int, batch: records.CandidatesGenerated, *, baselines: Sequence[tuple[EvalJob, str]] = ()
    ) -> None:
        """The batch's candidates not evaluated yet, in one executor call; `baselines` (jobs and their names) go with
        them, after them, so that their builds and device time overlap the initial candidate's."""
        hook = self.session.pm.hook
        pending = []
        for candidate in batch.candidates:
            if candidate.id in self.recorded:
                evaluation = self._planned_from(self.recorded[candidate.id].evaluation, self.profiled.get(candidate.id))
                self.history.append((candidate, evaluation))
                hook.hiera_candidate_evaluated(context=self.session.context, candidate=candidate, evaluation=evaluation)
            else:
                pending.append(self._job(candidate))
        names = {job.workdir: name for job, name in baselines}
        for job, evaluated in self._evaluated([*pending, *(job for job, _ in baselines)], f"candidate(s) of round {round_}"):
            if job.workdir in names:
                self._record_baseline(names[job.workdir], job, evaluated)
            else:
                self._record(job, evaluated)
        # the round's candidates in the order they were written, however the executor finished them: the next
        # prompts list them so, the same in a run and in its resume (whose model requests are named by their text)
        order = {c.id: k for k, c in enumerate(batch.candidates)}
        self.history.sort(key=lambda entry: order.get(entry[0].id, -1))
        best = self.best()
        best_eval = self._evaluation_of(best)
        latency = best_eval.latency_ms if isinstance(best_eval, Measured) else None
        if not any(isinstance(e, records.RoundFinished) and e.round == round_ for e in self.store.events):
            self.store.append(
                records.RoundFinished(round=round_, best_candidate_id=best.id if best else None, best_latency_ms=latency)
            )
        hook.hiera_round_finished(context=self.session.context, round=round_, best=best, best_latency_ms=latency)

    def _job(
        self,
        candidate: Candidate,
        *,
        remeasure: int | None = None,
        compiled_reference: bool = False,
    ) -> EvalJob:
        """The job evaluating `candidate` in the search, or in pass `remeasure` of the final re-measurement (built
        and judged again in a fresh folder and process, on fresh inputs). Its judge times the reference again in a
        re-measurement or before any evaluation has (`_reference_ms`), and reports that figure otherwise."""
        workdir = self.store.candidate_dir(candidate.id)
        if remeasure is not None:
            workdir = workdir / f"remeasure-{remeasure}"
        return new_job(
            self.session,
            candidate,
            contract=self.contract,
            toolchain=self.toolchain,
            roofline=self.roofline,
            workdir=workdir,
            remeasure=remeasure is not None,
            compiled_reference=compiled_reference,
            reference_ms=None if remeasure is not None else self._reference_ms(),
        )

    def _reference_ms(self) -> float | None:
        """The task's reference latency as the run's first measured evaluation (a baseline's or a candidate's) timed
        it, which the search's later judges report instead of timing the reference again; None before."""
        for event in self.store.events:
            if isinstance(event, records.BaselineEvaluated | records.CandidateEvaluated) and isinstance(
                event.evaluation, Measured
            ):
                return event.evaluation.reference_latency_ms
        return None

    def _record(self, job: EvalJob, evaluated: Evaluated) -> None:
        candidate, evaluation = job.candidate, evaluated.evaluation
        write_files(job.workdir, evaluated.files)
        write_text_atomic(job.workdir / "evaluation.json", evaluation_to_json(evaluation))
        event = records.CandidateEvaluated(
            candidate=candidate,
            evaluation=evaluation,
            wall_s=evaluated.wall_s,
            stage_s=evaluated.stage_s,
            timeline=evaluated.timeline,
        )
        self.store.append(event)
        self.recorded[candidate.id] = event
        self.history.append((candidate, evaluation))
        log.info("candidate_evaluated", candidate=candidate.id, outcome=type(evaluation).__name__, attempts=evaluated.attempts)
        self.session.pm.hook.hiera_candidate_evaluated(context=self.session.context, candidate=candidate, evaluation=evaluation)

    def _profile_parents(self) -> None:
        """The parents' measurements refined by the on-demand stages (a profiler) where the architecture has any and
        they have not been yet: planning reads these, and no other candidate needs them."""
        if not any(protocols.optional(e, "on_demand") for e in self.session.evaluators):
            return
        wanted = [c for c in self.parents(self.run.parents) if c.id not in self.profiled]
        jobs = [attrs.evolve(self._job(c), refine=True, measured=_measured(self._evaluation_of(c))) for c in wanted]
        for job, evaluated in self._evaluated(jobs, "parent(s) to profile"):
            write_files(job.workdir, evaluated.files)
            event = records.CandidateProfiled(
                candidate_id=job.candidate.id,
                evaluation=evaluated.evaluation,
                wall_s=round(evaluated.wall_s, 4),
                stage_s=evaluated.stage_s,
                timeline=evaluated.timeline,
            )
            self.store.append(event)
            self.profiled[job.candidate.id] = event
            self.history = [(c, self._planned_from(e, event) if c.id == job.candidate.id else e) for c, e in self.history]
            log.info("parent_profiled", candidate=job.candidate.id, outcome=type(evaluated.evaluation).__name__)

    @staticmethod
    def _planned_from(evaluation: Evaluation, profiled: records.CandidateProfiled | None) -> Evaluation:
        """What planning reads of a candidate: its refined measurement where the on-demand stages gave one (their
        failure leaves the first measurement standing)."""
        if profiled is not None and isinstance(profiled.evaluation, Measured):
            return profiled.evaluation
        return evaluation

    @contextlib.contextmanager
    def _beside_the_search(self, baselines: Sequence[tuple[EvalJob, str]]) -> Iterator[None]:
        """Evaluate `baselines` in a thread of their own while the block (the search) runs, their device stages
        behind the search's (`EvalJob.background`): on a GPU they take it while a round's candidates build rather
        than keep the initial candidate, its profile and round 1 waiting (~40 s on the H100, 2026-12-06). Recorded
        when the block ends, however it ends; an executor's failure there is raised unless the block raised."""
        if not baselines:
            yield
            return
        names = {job.workdir: name for job, name in baselines}
        jobs = [attrs.evolve(job, background=True) for job, _ in baselines]
        done: list[tuple[EvalJob, Evaluated]] = []
        failed: list[BaseException] = []

        def evaluate() -> None:
            try:
                done.extend(self._evaluated(jobs, "baseline(s)"))
            except BaseException as exc:  # noqa: BLE001 -- raised in the run's own thread below (an interrupt too)
                failed.append(exc)

        thread = threading.Thread(target=evaluate, name="hiera-baselines", daemon=True)
        thread.start()
        try:
            yield
        except KeyboardInterrupt:
            if cancel := protocols.optional(self.session.executor, "cancel"):
                cancel()  # the baselines not started are dropped, as the search's are
            raise
        finally:
            thread.join()
            for job, evaluated in done:
                self._record_baseline(names[job.workdir], job, evaluated)
        if failed:
            raise failed[0]

    def _baseline_jobs(self) -> list[tuple[EvalJob, str]]:
        """The workload's baselines not evaluated yet, as jobs with their names: each is evaluated once per run like a
        candidate (outside the budget), beside the initial candidate. One an earlier run measured on this machine
        and toolchain (`[run] baseline_cache`) is recorded from there instead."""
        offered = protocols.optional(self.session.workload, "baselines")
        if offered is None:
            return []
        done = {e.name for e in self.store.events if isinstance(e, records.BaselineEvaluated)}
        jobs = []
        for baseline in offered(self.session.task, self.session.arch_kind):
            if baseline.name in done:
                continue
            candidate = Candidate(
                id=candidate_id(baseline.source, self.contract, self.toolchain),
                source=baseline.source,
                space=baseline.space,
                round=0,
                origin=baseline.origin or baseline.name,
            )
            kept = baseline_cache.recall(self.run.baseline_cache, self._baseline_key(candidate))
            if kept is not None:
                evaluation, reused_from = kept
                self.store.append(
                    records.BaselineEvaluated(
                        name=baseline.name, candidate=candidate, evaluation=evaluation, wall_s=0.0, reused_from=reused_from
                    )
                )
                log.info("baseline_reused", baseline=baseline.name, reused_from=reused_from)
                continue
            job = new_job(
                self.session,
                candidate,
                contract=self.contract,
                toolchain=self.toolchain,
                roofline=self.roofline,
                workdir=self.store.path / "baselines" / candidate.id,
            )
            jobs.append((job, baseline.name))
        return jobs

    def _baseline_key(self, candidate: Candidate) -> str:
        manifest, session = self.store.manifest, self.session
        return baseline_cache.key(
            arch=session.arch_name,
            hardware=manifest.hardware,
            toolchain=self.toolchain,
            versions=manifest.versions,
            evaluators=session.config.table().get("evaluator", {}),
            workload=session.workload.name,
            task=session.task,
            contract_id=self.contract.id,
            source=candidate.source,
        )

    def _record_baseline(self, name: str, job: EvalJob, evaluated: Evaluated) -> None:
        write_files(job.workdir, evaluated.files)
        write_text_atomic(job.workdir / "evaluation.json", evaluation_to_json(evaluated.evaluation))
        self.store.append(
            records.BaselineEvaluated(
                name=name,
                candidate=job.candidate,
                evaluation=evaluated.evaluation,
                wall_s=round(evaluated.wall_s, 4),
                stage_s=evaluated.stage_s,
                timeline=evaluated.timeline,
            )
        )
        if isinstance(evaluated.evaluation, Measured):
            baseline_cache.keep(
                self.run.baseline_cache, self._baseline_key(job.candidate), evaluated.evaluation, self.store.manifest.run_id
            )
        log.info("baseline_evaluated", baseline=name, outcome=type(evaluated.evaluation).__name__)

    # --- the verdict -----------------------------------------------------------------------

    def _finish(self) -> Candidate | None:
        """The run's winner, recorded once (`RunFinished`). With `[run] remeasure`, the `finalists` best candidates
        are measured again `remeasure_passes` times each, every time in a fresh process on fresh inputs: all passes in
        one batch, each pass's finalists in a rotated order (a busy or hot spell falls on every finalist alike; where
        the executor evaluates several at once, their judges start together and take the device as each is ready,
        so no pass waits for a judge's start after another pass). Every re-measurement's judge times the reference again,
        interleaved with its finalist: the headline's speedup is a ratio within one judge, whose process and hour may run
        the whole task slower (a KernelBench judge on an H100 read the same reference 3.99 ms where others read 3.39 and
        3.50, 2026-12-07). The winner is the finalist with the lowest re-measured median, and a finalist whose
        re-measurement is not `Measured` is out."""
        by_id = {c.id: c for c, _ in self.history}
        for event in self.store.events:
            if isinstance(event, records.RunFinished):
                return by_id.get(event.best_candidate_id) if event.best_candidate_id else None
        incumbent = self.best()
        if incumbent is None or not self.run.remeasure:
            self.store.append(records.RunFinished(best_candidate_id=incumbent.id if incumbent else None))
            return incumbent
        finalists = self.parents(self.run.finalists)
        done = {(e.candidate_id, e.pass_index): e for e in self.store.events if isinstance(e, records.Remeasured)}

        def out(candidate: Candidate) -> bool:
            return any(not isinstance(e.evaluation, Measured) for (cid, _), e in done.items() if cid == candidate.id)

        queued: list[tuple[int, EvalJob]] = []
        for pass_index in range(self.run.remeasure_passes):
            shift = pass_index % len(finalists)
            todo = [c for c in finalists[shift:] + finalists[:shift] if (c.id, pass_index) not in done and not out(c)]
            queued += [
                (
                    pass_index,
                    self._job(c, remeasure=pass_index, compiled_reference=pass_index == 0 and c is finalists[0]),
                )
                for c in todo
            ]
        pass_of = {job.workdir: pass_index for pass_index, job in queued}  # an executor yields in any order
        for job, evaluated in self._evaluated([job for _, job in queued], "re-measurement(s) of the finalists"):
            pass_index = pass_of[job.workdir]
            write_files(job.workdir, evaluated.files)
            event = records.Remeasured(
                candidate_id=job.candidate.id,
                pass_index=pass_index,
                evaluation=evaluated.evaluation,
                wall_s=round(evaluated.wall_s, 4),
                stage_s=evaluated.stage_s,
                timeline=evaluated.timeline,
            )
            self.store.append(event)
            done[(job.candidate.id, pass_index)] = event
            log.info(
                "finalist_remeasured",
                candidate=job.candidate.id,
                outcome=type(evaluated.evaluation).__name__,
                pass_index=pass_index,
            )
        standings = [
            standing(c.id, self._evaluation_of(c), [e.evaluation for (cid, _), e in sorted(done.items()) if cid == c.id])
            for c in finalists
        ]
        standings.sort(key=lambda f: (f.latency_ms is None, f.latency_ms or 0.0))
        winner = standings[0] if standings[0].latency_ms is not None else None
        remeasured = None
        if winner is not None:
            passes = sorted(
                (m for (cid, _), e in done.items() if cid == winner.candidate_id and isinstance(m := e.evaluation, Measured)),
                key=lambda m: m.latency_ms,
            )
            remeasured = passes[len(passes) // 2]
        self.store.append(
            records.RunFinished(
                best_candidate_id=winner.candidate_id if winner else None, remeasured=remeasured, finalists=standings
            )
        )
        return by_id[winner.candidate_id] if winner else None


def _measured(evaluation: Evaluation | None) -> Measured | None:
    return evaluation if isinstance(evaluation, Measured) else None


def standing(candidate_id: str, in_search: Evaluation | None, passes: list[Evaluation]) -> records.Finalist:
    """A finalist's `Finalist` record from its search evaluation and its re-measurements, in pass order: its figure is
    the median of theirs (the slower of two), the spread their range; a re-measurement that is not `Measured` puts
    it out, its reason kept."""
    in_search_ms = in_search.latency_ms if isinstance(in_search, Measured) else float("nan")
    failed = next((e for e in passes if not isinstance(e, Measured)), None)
    if failed is not None or not passes:
        reason = f"{type(failed).__name__}: {getattr(failed, 'reason', '')}" if failed else "not re-measured"
        return records.Finalist(candidate_id=candidate_id, in_search_ms=in_search_ms, reason=reason)
    figures = sorted(e.latency_ms for e in passes if isinstance(e, Measured))
    return records.Finalist(
        candidate_id=candidate_id,
        in_search_ms=in_search_ms,
        latency_ms=figures[len(figures) // 2],
        low_ms=figures[0],
        high_ms=figures[-1],
    )


def _nothing_left(round_: int, plan: records.Plan) -> records.CandidatesGenerated:
    """The planner scored every direction 0 (the expert does so when no direction has an untried move):
    the search ends here rather than asking for candidates that cannot come."""
    note = f"the search stops: the planner scored every direction 0 ({plan.decision.rationale})"
    log.info("search_exhausted", round=round_)
    return records.CandidatesGenerated(round=round_, candidates=[], notes=[note])


def evaluate_candidate(
    session: Session, job: EvalJob, stage_s: dict[str, float] | None = None, *, device: bool = True
) -> Evaluation | StagePassed:
    """One candidate through the session's pipeline in this process (`Pipeline.stages`)."""
    return session.pipeline.stages(job, stage_s, device=device)


def write_files(workdir: Path, files: Mapping[str, str]) -> None:
    """The text files the stages wrote when the job ran elsewhere, into the run's candidate folder `workdir`."""
    root = workdir.resolve()
    for name, text in files.items():
        path = (workdir / name).resolve()
        if path.is_relative_to(root) and path != root:  # a name from elsewhere never writes outside the folder
            write_text_atomic(path, text)


def roofline_for(session: Session) -> records.Roofline:
    """The task's floors on this machine: the workload's work over the architecture's peaks, measured now and
    remembered with the machine's earlier measurements (`hiera_core.peaks`: a busy moment does not lower them)."""
    bytes_moved, flops = session.workload.work(session.task, session.arch_kind)
    dtype = session.task.params.get("dtype", "float64")
    measured = session.arch.peaks(dtype)
    (peak_gbps, peak_gflops), count = peaks.remembered(session.arch_name, session.arch.hardware(), dtype, measured)
    reference_flops = protocols.optional(session.workload, "reference_flops")
    return records.Roofline(
        bytes_moved=bytes_moved,
        flops=flops,
        peak_gbps=peak_gbps,
        peak_gflops=peak_gflops,
        measured_gbps=measured[0],
        measured_gflops=measured[1],
        measurements=count,
        reference_flops=reference_flops(session.task, session.arch_kind) if reference_flops else 0.0,
    )


def candidate_id(source: str, contract: records.Contract, toolchain: dict) -> str:
    return records.content_id(source, contract.id, json.dumps(toolchain, sort_keys=True))


def new_job(
    session: Session,
    candidate: Candidate,
    *,
    contract: records.Contract,
    toolchain: dict,
    roofline: records.Roofline | None,
    workdir: Path,
    remeasure: bool = False,
    compiled_reference: bool = False,
    reference_ms: float | None = None,
) -> EvalJob:
    """An evaluation job for `candidate`, its source written into `workdir`."""
    write_text_atomic(workdir / contract.source_filename, candidate.source)
    return EvalJob(
        candidate=candidate,
        task=session.task,
        contract=contract,
        arch=session.arch_name,
        space_rank=session.space(candidate.space).rank,
        workdir=workdir,
        workload_factory=workload_factory(type(session.workload)),
        workload_config=session.config.table().get("workload", {}).get(session.workload.name, {}),
        toolchain=toolchain,
        roofline=roofline,
        remeasure=remeasure,
        compiled_reference=compiled_reference,
        reference_ms=reference_ms,
    )


def workload_factory(workload: type) -> str:
    """How a judge or runner process rebuilds `workload`: `module:Class@DIR`, DIR the folder its module is
    imported from (a workload in a plain module beside the caller's script, registered as an object, has no
    entry point to be found by; the judge appends DIR to its import path)."""
    module = sys.modules[workload.__module__]
    if workload.__module__ == "__main__" or not module.__file__:
        raise ConfigError(
            f"workload class {workload.__qualname__} is defined in {workload.__module__}, which a judge's"
            " process cannot import: define it in a module (a .py file beside your script)"
        )
    root = Path(module.__file__).resolve().parents[workload.__module__.count(".") + (Path(module.__file__).stem == "__init__")]
    return f"{workload.__module__}:{workload.__qualname__}@{root}"


def evaluate_source(
    session: Session, source: str, *, space: str, workdir: Path, device: bool = True
) -> tuple[Candidate, Evaluation | StagePassed]:
    """`hiera eval`: one hand-written candidate through the same pipeline as a run's candidates, its measurement then
    refined by the on-demand stages (a profiler), as a parent's is; with `device=False` only the stages before the
    device (static checks and the build)."""
    contract = session.workload.contract(session.task, session.arch_kind)
    toolchain = session.arch.toolchain()
    candidate = Candidate(
        id=candidate_id(source, contract, toolchain), source=source, space=space, round=0, origin="hand-written"
    )
    job = new_job(
        session,
        candidate,
        contract=contract,
        toolchain=toolchain,
        roofline=roofline_for(session) if device else None,
        workdir=workdir / candidate.id,
    )
    result = evaluate_candidate(session, job, device=device)
    if isinstance(result, Measured) and any(protocols.optional(e, "on_demand") for e in session.evaluators):
        refined = evaluate_candidate(session, attrs.evolve(job, refine=True, measured=result))
        result = refined if isinstance(refined, Measured) else result
    return candidate, result
