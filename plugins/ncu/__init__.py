"""Nsight Compute profiling of cuda candidates: the `cuda-profile` stage, a plugin of its own (entry point
`ncu`; `HIERA_DISABLE_PLUGINS=ncu` turns it off, and another profiler can stand in its place)."""

from __future__ import annotations

import json
import shutil
import sys
from typing import ClassVar

import attrs

from hiera_core import EvalJob, StagePassed, hookimpl
from hiera_core.config import ConfigError
from hiera_core.records import Evaluation
from hiera_judge import judging
from hiera_judge.judging import device_lock
from hiera_judge.sandbox import Handshake, describe_exit, run_sandboxed, runner_command
from hiera_plugins.cuda.architecture import gpu_lock_name
from hiera_plugins.ncu import profile

RUNNER = "hiera_plugins.cuda.runner"
"""The process ncu profiles: the cuda runner, which in `--profile` mode calls the candidate once inside an NVTX range.
It loads the candidate, so it runs as the judge's runner does, without capabilities and with no_new_privs
(`sandbox.runner_command`): as ncu's child it kept the sandbox's root capabilities, and could have remounted the
read-only disk. The H200's driver lets a process without them read the counters (RmProfilingAdminOnly: 0); a driver
that restricts them to admins gives ERR_NVGPUCTRPERM, a profile marked unavailable."""


@attrs.frozen(kw_only=True)
class NcuProfileConfig:
    device: int = 0
    enabled: bool = True
    ncu: str = ""
    """Path of the ncu binary; empty means search PATH and the usual install folders."""
    timeout_s: float = 300.0
    max_kernels: int = 0
    """Profile at most this many of a call's kernels, the first in launch order (ncu's `--launch-count`); 0: all. Each
    kernel costs ncu several replay passes while the GPU is held, and a level 3 KernelBench model launches hundreds.
    Off by default until the flag has run on a GPU (written 2026-12-05 without one)."""
    when: str = "parents"
    """`parents`: profile only the candidates planning reads, before a round is planned from them (the profile is
    what the planner scores the directions from); `every`: every candidate, as it is evaluated."""

    def __attrs_post_init__(self) -> None:
        if self.when not in ("parents", "every"):
            raise ConfigError(f"[evaluator.cuda-profile] when must be 'parents' or 'every', not {self.when!r}")
        if self.max_kernels < 0:
            raise ConfigError(f"[evaluator.cuda-profile] max_kernels must be >= 0 (0: all), not {self.max_kernels}")


class NcuProfile:
    name: ClassVar[str] = "cuda-profile"
    config_class: ClassVar[type] = NcuProfileConfig
    arch: ClassVar[str] = "cuda"
    order: ClassVar[int] = 30
    holds_device: ClassVar[bool] = True

    def __init__(self, config: NcuProfileConfig) -> None:
        self.config = config

    @property
    def on_demand(self) -> bool:
        """Only the parents are profiled (`when = "parents"`), when a round is planned from them; a disabled profiler
        only says so, on every candidate, with no refine job for it."""
        return self.config.enabled and self.config.when == "parents"

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        measured = job.measured
        if measured is None or job.remeasure:
            return StagePassed(job=job)
        ncu = self.config.ncu or profile.find_ncu()
        if not self.config.enabled or ncu is None:
            why = (
                "profiling is disabled ([evaluator.cuda-profile] enabled = false)" if not self.config.enabled else "ncu not found"
            )
            return _unprofiled(measured, why)
        range_name = "hiera_profile"
        request = {**job.worker_request(), "nvtx_range": range_name}
        command = profile.ncu_command(
            runner_command([sys.executable, "-m", RUNNER, str(self.config.device), "--profile"]),
            ncu=ncu,
            nvtx_range=range_name,
            max_kernels=self.config.max_kernels,
        )
        scratch = job.workdir / "profile"
        try:  # the GPU is held from the runner's READY (ncu, Python and the harness started) to ncu's end
            result = run_sandboxed(
                command,
                cwd=scratch,
                readable=[job.workdir, job.library.parent],
                timeout_s=self.config.timeout_s,
                stdin=json.dumps(request) + "\n",
                stop=judging.stopping,
                handshake=Handshake(
                    ready=judging.READY,
                    go=f"go {json.dumps(str(job.library))}",
                    lock=device_lock(gpu_lock_name(self.config.device)),
                ),
            )
            if result.stopped:  # the run is stopping: the parent is profiled when it resumes
                raise judging.Interrupted()
        finally:  # ncu's own files (its section files, ~2 MB, under HOME) and the runner's: none is the record's
            shutil.rmtree(scratch, ignore_errors=True)
        (job.workdir / "ncu.log").write_text(result.stdout[-200_000:] + result.stderr[-20_000:])
        # ncu's messages and table are on its stdout; the profiled process's output (the candidate's, on its stderr
        # since the runner moved its stdout there) cannot say that the profile failed
        problem = "ncu timed out" if result.timed_out else profile.permission_problem(result.stdout)
        kernels = [] if problem else profile.parse_ncu_csv(result.stdout)
        if problem or not kernels:
            return _unprofiled(
                measured, problem or f"ncu reported no kernel in the NVTX range ({describe_exit(result.returncode or 0)})"
            )
        partial = 0 < self.config.max_kernels <= len(kernels)  # ncu stopped at the cap: the call may have launched more
        summary = profile.summarize(
            kernels, latency_ms=measured.latency_ms, roofline=job.roofline, partial=partial
        )  # SMs: ncu's launch__sm_count
        return attrs.evolve(measured, profile=summary)


def _unprofiled(measured, why: str):
    """The measurement as the run stage left it (floor fractions from the latency), saying why there are no counters."""
    if measured.profile is None:
        return measured
    return attrs.evolve(measured, profile=attrs.evolve(measured.profile, unavailable=why))


@hookimpl
def hiera_register_evaluators():
    return [NcuProfile]
