"""Baselines measured by earlier runs, kept across runs.

A workload's baselines (stencil2d on a GPU: cuDNN two ways and FFT) are the same measurement in every run of a task
on one machine: on the H200 they took the first 90 s of a 543 s run. A measured baseline is kept in `[run]
baseline_cache` (`~/.cache/hiera/baselines`), one file per key, and a later run of the same task, contract and
baseline source on the same architecture, hardware, toolchain, versions and evaluator settings takes it
from there, saying so in
its record (`BaselineEvaluated.reused_from`) and its report. What failed is not kept; `baseline_cache = ""` measures
every run's baselines afresh. The reference's figure comes with it (`Measured.reference_latency_ms`): the run's
judges report it instead of timing the reference, and the final re-measurement times it again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hiera_core.records import Measured, Task, content_id
from hiera_core.serialization import from_dict, to_dict
from hiera_core.store import write_text_atomic


def key(
    *,
    arch: str,
    hardware: dict[str, Any],
    toolchain: dict[str, Any],
    versions: dict[str, str],
    evaluators: dict[str, Any],
    workload: str,
    task: Task,
    contract_id: str,
    source: str,
) -> str:
    """What a baseline's figure depends on: the machine, the toolchain, the versions of hiera and its plugins, the
    evaluators' settings, the task, its contract and the baseline's source."""
    machine = json.dumps(
        {"arch": arch, "hardware": hardware, "toolchain": toolchain, "versions": versions, "evaluators": evaluators},
        sort_keys=True,
        default=str,
    )
    return content_id(machine, workload, json.dumps(to_dict(task), sort_keys=True), contract_id, source)


def recall(directory: str, baseline_key: str) -> tuple[Measured, str] | None:
    """The kept measurement and where it comes from ("run R, DATE"), or None (nothing kept, no cache, unreadable)."""
    if not directory:
        return None
    path = Path(directory).expanduser() / f"{baseline_key}.json"
    try:
        kept = json.loads(path.read_text())
        return from_dict(kept["evaluation"], Measured), f"run {kept['run_id']}, {kept['at']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(directory: str, baseline_key: str, evaluation: Measured, run_id: str) -> None:
    """Keep a measured baseline for later runs (nothing when the cache is off)."""
    if not directory:
        return
    path = Path(directory).expanduser() / f"{baseline_key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_text_atomic(path, json.dumps({"run_id": run_id, "at": at, "evaluation": to_dict(evaluation, Measured)}, indent=1))
