"""The run directory: manifest, append-only trajectory, candidate files, report and plots.

runs/<id>/manifest.json        RunManifest (config, versions, hardware, task)
runs/<id>/trajectory.jsonl     one Event per line, flushed and fsynced as written
runs/<id>/candidates/<id>/     the source, the evaluation record, build logs
runs/<id>/report.md, plots/    written at the end (and by `hiera report`)
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from pathlib import Path
from typing import IO

import structlog

import hiera_core.records as records
import hiera_core.serialization as serialization
from hiera_core.errors import HieraError

log = structlog.get_logger(__name__)

MANIFEST = "manifest.json"
TRAJECTORY = "trajectory.jsonl"
LOCK = ".lock"


class RunDirError(HieraError):
    """A run directory is missing, not a run, or already holds a different run."""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


class RunStore:
    """Reads and appends to one run directory."""

    def __init__(
        self, path: Path, manifest: records.RunManifest, events: list[records.Event], times: list[float | None] | None = None
    ):
        self.path = path.resolve()
        self.manifest = manifest
        self.events = events
        self.times: list[float | None] = times if times is not None else [None] * len(events)
        """When each event was recorded (Unix seconds; None for lines written before hiera recorded it)."""
        self._lock: IO[str] | None = None

    def lock(self) -> None:
        """Hold the run directory for this process (released when it ends, however it ends); a second
        optimizer on the same directory fails here instead of evaluating every candidate twice."""
        handle = open(self.path / LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunDirError(f"{self.path} is in use by {holder}; wait for it to finish (or stop it) first") from None
        handle.truncate(0)
        handle.write(f"hiera process {os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @classmethod
    def create(cls, path: Path, manifest: records.RunManifest) -> RunStore:
        if (path / MANIFEST).exists():
            raise RunDirError(f"{path} already holds a run; use `hiera resume {path}` to continue it")
        path.mkdir(parents=True, exist_ok=True)
        (path / "candidates").mkdir(exist_ok=True)
        write_text_atomic(path / MANIFEST, json.dumps(serialization.to_dict(manifest), indent=2, sort_keys=True))
        (path / TRAJECTORY).touch()
        return cls(path, manifest, [])

    @classmethod
    def open(cls, path: Path) -> RunStore:
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise RunDirError(f"{path} is not a hiera run directory (no {MANIFEST})")
        data = json.loads(manifest_path.read_text())
        if data.get("schema_version") != records.SCHEMA_VERSION:
            raise RunDirError(f"{manifest_path}: schema {data.get('schema_version')}, this hiera reads {records.SCHEMA_VERSION}")
        manifest = serialization.from_dict(data, records.RunManifest)
        events: list[records.Event] = []
        times: list[float | None] = []
        lines = (path / TRAJECTORY).read_text().splitlines() if (path / TRAJECTORY).exists() else []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event, at = serialization.timed_event_from_line(line)
                events.append(event)
                times.append(at)
            except (json.JSONDecodeError, ValueError) as exc:
                if number == len(lines):  # the process was killed while writing this line
                    log.warning("trajectory_tail_dropped", line=number, error=str(exc))
                    _truncate_last_line(path / TRAJECTORY)
                    break
                raise RunDirError(f"{path / TRAJECTORY}:{number}: unreadable record: {exc}") from exc
        return cls(path, manifest, events, times)

    def append(self, event: records.Event) -> None:
        at = time.time()
        with open(self.path / TRAJECTORY, "a") as f:
            f.write(serialization.event_to_line(event, at) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(event)
        self.times.append(at)

    def candidate_dir(self, candidate_id: str) -> Path:
        path = self.path / "candidates" / candidate_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def evaluated(self) -> dict[str, records.CandidateEvaluated]:
        """Evaluations already on disk, by candidate id."""
        return {e.candidate.id: e for e in self.events if isinstance(e, records.CandidateEvaluated)}


def _truncate_last_line(path: Path) -> None:
    data = path.read_bytes()
    keep = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    path.write_bytes(keep)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a whole file so that a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
