"""The `local` executor: evaluates candidates on this machine, a few at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import attrs

from hiera_core import EvalJob, hookimpl
from hiera_core.pipeline import Evaluated, Pipeline


@attrs.frozen(kw_only=True)
class LocalConfig:
    workers: int = 1
    """Candidates evaluated concurrently. Stages that time or use a device serialise on their own lock."""

    def __attrs_post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")


class LocalExecutor:
    name: ClassVar[str] = "local"
    config_class: ClassVar[type] = LocalConfig

    def __init__(self, config: LocalConfig) -> None:
        self.config = config

    def run(self, jobs: Iterable[EvalJob], pipeline: Pipeline) -> Iterator[tuple[EvalJob, Evaluated]]:
        jobs = list(jobs)
        if self.config.workers == 1:
            for job in jobs:
                yield job, pipeline.evaluate(job)
            return
        with ThreadPoolExecutor(max_workers=self.config.workers) as pool:
            futures = [(job, pool.submit(pipeline.evaluate, job)) for job in jobs]
            for job, future in futures:
                yield job, future.result()


@hookimpl
def hiera_register_executors():
    return [LocalExecutor]


@hookimpl
def hiera_run_defaults() -> dict[str, str]:
    return {"executor": LocalExecutor.name}
