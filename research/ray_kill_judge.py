"""Kill one Ray worker that holds a GPU share, in the middle of a run, and say what the run made of it (issue 36).

Runs the given hiera command (a run through `run.executor=ray` with a cluster hiera starts, so Ray's processes are
the command's descendants); once a worker evaluating a job on the GPU (`ray::_evaluate` with a judge under it: `--judge`, the cuda one by default)
has been busy for `--busy` seconds, after `--after` seconds of the run, it is killed with SIGKILL
(its judge and runner go with it: the sandbox dies with its worker). When the command ends, the run folder is read:
every candidate must be recorded once, and the killed job's candidate must be retried once (`ray_worker_lost`, then
`attempts` 2) or recorded Crashed with Ray's reason.

    python3 research/ray_kill_judge.py --after 100 -- hiera --workload stencil2d --set run.executor=ray \\
        --run-dir /tmp/case/ray-kill

Prints what it killed and when, the command's exit code, and the check's lines; exits 1 when a check fails."""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TITLE = b"ray::_evaluate"


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children[int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])].append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    found, todo = [], list(children[root])
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children[pid])
    return found


def cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def judging_workers(root: int, judge: bytes) -> list[int]:
    """The command's Ray workers evaluating a job whose cuda judge is running (a worker holding a GPU share: Ray sets
    its `CUDA_VISIBLE_DEVICES` inside the process, per task, where /proc does not show it)."""
    return [
        pid
        for pid in descendants(root)
        if cmdline(pid).startswith(TITLE) and any(judge in cmdline(child) for child in descendants(pid))
    ]


def check(run_dir: Path) -> list[str]:
    """The failures of the run's record: a candidate recorded twice or not at all, a lost job neither retried nor
    Crashed."""
    events = [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text().splitlines() if line.strip()]
    generated = [c["id"] for e in events if e["kind"] == "candidates_generated" for c in e["candidates"]]
    evaluated = collections.Counter(e["candidate"]["id"] for e in events if e["kind"] == "candidate_evaluated")
    log = [json.loads(line) for line in (run_dir / "hiera.log.jsonl").read_text().splitlines() if line.strip()]
    lost = [line["candidate"] for line in log if line["event"] == "ray_worker_lost"]
    crashed = [
        e["candidate"]["id"]
        for e in events
        if e["kind"] == "candidate_evaluated" and "Ray worker died" in json.dumps(e.get("evaluation", {}))
    ]
    retried = [line["candidate"] for line in log if line["event"] == "candidate_evaluated" and line.get("attempts") == 2]
    print(
        f"candidates generated {len(generated)}, recorded {sum(evaluated.values())}; lost {lost}, retried {retried},"
        f" crashed {crashed}"
    )
    failures = [f"{c} recorded {evaluated[c]} times" for c in generated if evaluated[c] != 1]
    if not lost and not crashed:
        failures.append("no job was lost: the kill missed")
    failures += [f"{c} was lost and neither retried nor recorded Crashed" for c in set(lost) - set(retried) - set(crashed)]
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", type=float, default=100.0, help="seconds into the run before the kill")
    parser.add_argument("--busy", type=float, default=5.0, help="seconds the worker has been seen busy")
    parser.add_argument("--judge", default="hiera_plugins.cuda.judge", help="the judge's module (host: hiera_plugins.host.judge)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    run_dir = Path(command[command.index("--run-dir") + 1])
    started = time.monotonic()
    run = subprocess.Popen(command)
    seen: dict[int, float] = {}
    killed = None
    while run.poll() is None:
        now = time.monotonic()
        busy = judging_workers(run.pid, args.judge.encode())
        seen = {pid: seen.get(pid, now) for pid in busy}
        ready = [pid for pid, since in seen.items() if now - since >= args.busy]
        if killed is None and now - started >= args.after and ready:
            killed = ready[0]
            os.kill(killed, signal.SIGKILL)
            print(f"killed worker {killed} at {now - started:.1f} s (busy {now - seen[killed]:.1f} s)", flush=True)
        time.sleep(0.2)
    print(f"command exit code {run.returncode}, {time.monotonic() - started:.1f} s")
    failures = check(run_dir) if killed is not None else ["nothing was killed: no GPU worker was busy long enough"]
    for line in failures:
        print(f"FAILED: {line}")
    sys.exit(1 if failures or run.returncode else 0)


if __name__ == "__main__":
    main()
