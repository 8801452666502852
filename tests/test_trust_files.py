"""Nothing the sandbox writes is opened by hiera's own process, and a judge that dies in any way is `Crashed`.

Each fake judge below runs through the real sandbox (`StartedJudge` -> `sandbox.start`) as `python -m` a module of
this test's own, and attacks what hiera once read: it replaces the runner's log in its scratch folder with a link to
`/proc/self/environ` (which, opened by hiera, is hiera's environment and its API key), a FIFO or a link to
/dev/zero, then dies; or it answers with a 100 MB line, a line that is not an answer, or nothing. hiera must record a
crash that says how the judge ended, hold no byte of its secret, return at once and not grow."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
import types

import pytest

from hiera_core.records import Crashed, TimedOut
from hiera_core.serialization import from_dict
from hiera_judge import judging, sandbox
from hiera_judge.messages import JudgeAnswer

SECRET = "sk-hiera-trust-files-0123456789abcdef"

FAKE_JUDGE = textwrap.dedent(r"""
    import ctypes, json, mmap, os, signal, sys, time

    sys.stdin.readline()  # the request
    if os.environ["HIERA_FAKE_ATTACK"] == "answer-before-ready":  # as a judge whose runner never started answers
        print(json.dumps({"kind": "timed_out", "limit_s": 7.0}), flush=True)
        print("hiera-judge-answered", flush=True)
        os._exit(0)
    print("hiera-judge-ready", flush=True)
    sys.stdin.readline()  # go
    attack = os.environ["HIERA_FAKE_ATTACK"]
    with open("runner.log", "w") as log:  # what the judge's runner wrote, before the candidate replaces it
        log.write("Traceback (most recent call last):\nSegmentation fault in row 37\n")
    if attack.startswith("environ"):
        os.remove("runner.log"); os.symlink("/proc/self/environ", "runner.log")
    elif attack.startswith("fifo"):
        os.remove("runner.log"); os.mkfifo("runner.log")
    elif attack.startswith("zero"):
        os.remove("runner.log"); os.symlink("/dev/zero", "runner.log")
    print(f"fake judge: {attack}", file=sys.stderr, flush=True)

    if attack.endswith("-rt"):  # a real-time signal signal.Signals cannot name (as PID 1 nothing kills it: no namespace)
        os.kill(os.getpid(), 40)
    elif attack.endswith("-interrupt"):  # the candidate signals PID 1 of the namespace: the judge itself
        if os.fork() == 0:
            os.kill(1, signal.SIGINT); os._exit(0)
        time.sleep(30)
    elif attack.endswith("-segv"):
        ctypes.string_at(0)
    elif attack.endswith("-exit"):
        os._exit(9)
    elif attack == "sigbus":  # a page of a file that was truncated under its mapping: the kernel's SIGBUS kills PID 1 too
        with open("mapped", "w+b") as f:
            f.write(b"x" * 4096); f.flush()
            page = mmap.mmap(f.fileno(), 4096); f.truncate(0); page[0]
    elif attack == "long-line":
        sys.stdout.write("x" * (100 << 20) + "\n"); sys.stdout.flush()
    elif attack == "not-an-answer":
        print(json.dumps({"kind": "judged", "latency_ms": "fast"}), flush=True)
    elif attack == "garbage":
        sys.stdout.buffer.write(b"\xff\xfe{\x1b[2J" + os.urandom(64).replace(b"\n", b"") + b"\n"); sys.stdout.flush()
    elif attack.startswith("closed"):  # closes its output without an answer, then ends (or lives on)
        os.close(1); time.sleep(0.5 if attack == "closed" else 60); os._exit(4)
    elif attack.startswith("answer"):
        print(json.dumps({"kind": "timed_out", "limit_s": 7.0}), flush=True)
    if attack == "answer-then-linger":  # says it answered, then takes its time to end (a GPU context's teardown)
        print("hiera-judge-answered", flush=True)
    if attack in ("not-an-answer", "garbage", "answer"):
        os._exit(0)
    time.sleep(60)
""")


# hiera's side, in a process of its own that has the secret in the environment it was started with (what
# /proc/self/environ shows): it runs one attack through `StartedJudge` and prints the record, the seconds it took and
# how many MB its own peak memory grew.
HIERA = textwrap.dedent(r"""
    import json, resource, sys, time, types
    from pathlib import Path
    import attrs
    from hiera_judge import judging, sandbox
    from hiera_core.records import Task
    from hiera_judge.messages import JudgeAnswer, JudgeRequest
    from hiera_core.serialization import to_dict

    attack, workdir, timeout_s, namespace = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "pid"
    if not namespace:
        full = sandbox.protection()
        sandbox.protection = lambda: attrs.evolve(full, pid_namespace=False)
    workdir.mkdir()
    library = workdir / "candidate.so"
    library.write_bytes(b"not really a library")
    request = JudgeRequest(workload_factory="none:None", workload_config={}, task=Task(workload="w", name="t"), settings=None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    judge = judging.StartedJudge("fake_judge", request, workdir=workdir, timeout_s=timeout_s,
                                 measured=lambda job, judged: judged, memory_bytes=2 << 30,
                                 env_extra={"HIERA_FAKE_ATTACK": attack},
                                 slot=lambda: print("slot given back", file=sys.stderr, flush=True))
    result = judge.evaluate(types.SimpleNamespace(library=Path(library)))
    print(json.dumps({"record": to_dict(result, JudgeAnswer), "seconds": time.monotonic() - started,
                      "grown_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
""")


@pytest.fixture
def fake_judge(tmp_path):
    """A function that runs one attack through `StartedJudge` in a hiera process of its own and returns (the record,
    seconds taken, MB grown, all that process printed)."""
    if not sandbox.protection().pid_namespace:
        pytest.skip("no PID namespace on this machine")
    (tmp_path / "fake_judge.py").write_text(FAKE_JUDGE)
    (tmp_path / "hiera_side.py").write_text(HIERA)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {"OPENAI_API_KEY": SECRET, **os.environ, "PYTHONPATH": path}  # first: the start of /proc/self/environ

    def run(attack: str, *, timeout_s: float = 30, namespace: str = "pid"):
        done = subprocess.run(
            [sys.executable, str(tmp_path / "hiera_side.py"), attack, str(tmp_path / attack), str(timeout_s), namespace],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        return from_dict(said["record"], JudgeAnswer), said["seconds"], said["grown_mb"], done.stdout + done.stderr

    return run


# attack: words the reason must hold (how the judge ended)
ATTACKS = {
    "environ-interrupt": "exit status 130",
    "fifo-segv": "SIGSEGV",
    "zero-exit": "exit status 9",
    "sigbus": "SIGBUS",
    "long-line": "longer than",
    "not-an-answer": "did not decode",
    "garbage": "did not decode",
    "closed": "exit status 4",
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_judge_that_dies_any_way_is_crashed_and_leaks_nothing(fake_judge, attack):
    result, seconds, grown_mb, printed = fake_judge(attack)

    assert isinstance(result, Crashed), result
    assert ATTACKS[attack] in result.reason
    assert SECRET not in printed
    assert printed.count("slot given back") == 1  # the judge's place on the device (`judging.judge_slot`) is free again
    assert seconds < judging.ENDING_S + 10
    assert grown_mb < 200


def test_a_judge_killed_by_a_real_time_signal_beside_a_link_to_hieras_environment(fake_judge):
    """Without a PID namespace the judge is no namespace's PID 1, so a real-time signal kills it (in one, nothing but
    SIGKILL from outside does); `signal.Signals(40)` raised, and hiera read the link to its own environment."""
    result, seconds, grown_mb, printed = fake_judge("environ-rt", namespace="none")

    assert isinstance(result, Crashed)
    assert "killed by SIGRTMIN+6" in result.reason and "fake judge: environ-rt" in result.reason
    assert SECRET not in printed
    assert seconds < 10 and grown_mb < 200


def test_a_judge_that_closes_its_output_and_lives_on_times_out(fake_judge):
    result, seconds, _, _ = fake_judge("closed-lives", timeout_s=2)

    assert result == TimedOut(limit_s=2) and seconds < 10


def test_an_answer_is_still_the_verdict(fake_judge):
    result, _, _, _ = fake_judge("answer")

    assert result == TimedOut(limit_s=7.0)


def test_a_judge_that_has_answered_is_ended_at_once_not_waited_for(fake_judge):
    """The device lock is held from `go` to the end of the judge: once it says `ANSWERED`, hiera ends its sandbox
    rather than wait through its own exit."""
    result, seconds, _, _ = fake_judge("answer-then-linger")

    assert result == TimedOut(limit_s=7.0) and seconds < judging.ENDING_S
    assert fake_judge("answer-before-ready")[0] == TimedOut(limit_s=7.0)


# --- the one way hiera reads a file a sandbox could have written ---------------------------------------------


def test_untrusted_tail_reads_the_end_of_a_regular_file_only(tmp_path):
    big = tmp_path / "big.log"
    with open(big, "wb") as handle:  # 10 GB, sparse, ending in the line that matters
        handle.truncate(10 << 30)
        handle.seek(0, os.SEEK_END)
        handle.write(b"the last line\n")
    (tmp_path / "environ").symlink_to("/proc/self/environ")
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    started = time.monotonic()

    assert judging.untrusted_tail(big, 64).endswith(b"the last line\n") and len(judging.untrusted_tail(big, 64)) == 64
    for odd in ("environ", "zero", "fifo", "missing"):
        assert judging.untrusted_tail(tmp_path / odd, 1 << 20) == b""
    assert judging.untrusted_tail(tmp_path, 64) == b""
    assert judging.untrusted_tail("/dev/zero", 64) == b""
    assert time.monotonic() - started < 2


# --- Nsight Compute: its output comes through pipes, bounded, from a process that runs the candidate ----------

FAKE_NCU = textwrap.dedent(r"""
    import os, sys, time
    sys.stdin.readline()  # the request
    print(READY, flush=True)  # started: hiera takes the GPU, then says go
    assert sys.stdin.readline().startswith("go ")
    out = sys.stdout.buffer
    if behaviour in ("flood", "flood-then-table"):  # the profiled candidate prints 200 MB, bytes that decode as nothing
        block = b"\xff\xfe\x1b[2J" + b"x" * (1 << 20) + b"\n"
        for _ in range(200):
            out.write(block)
    if behaviour == "false-error":  # the candidate says on its stderr that the counters are not allowed
        sys.stderr.write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    if behaviour in ("flood-then-table", "false-error"):
        out.write(TABLE.encode())
    if behaviour == "hang":
        time.sleep(60)
    out.flush()
""")


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """A function that runs the `cuda-profile` stage with a fake ncu (a `behaviour` of FAKE_NCU) and returns (the measurement it
    leaves, seconds taken, MB this process grew)."""
    import attrs

    from hiera_core.records import Measured, Profile
    from hiera_plugins.ncu import NcuProfile, NcuProfileConfig
    from tests.test_ncu_profile import NCU_OUTPUT

    if not sandbox.protection().pid_namespace:
        pytest.skip("no PID namespace on this machine")
    monkeypatch.setattr("hiera_plugins.ncu.device_lock", lambda name: contextlib.nullcontext())
    measured = Measured(
        latency_ms=0.07,
        latency_p10_ms=0.07,
        latency_p90_ms=0.07,
        repeats=10,
        reference_latency_ms=1.0,
        max_abs_error=0.0,
        profile=Profile(source="cuda-events"),
    )

    def run(behaviour: str, timeout_s: float = 60):
        workdir = tmp_path / behaviour
        (workdir / "build").mkdir(parents=True)
        ncu = workdir / "ncu"  # the sandbox passes no variable of ours: the behaviour is written in
        ncu.write_text(
            f"#!{sys.executable}\nTABLE, behaviour, READY = {NCU_OUTPUT!r}, {behaviour!r}, {judging.READY!r}\n{FAKE_NCU}"
        )
        ncu.chmod(0o755)
        job = types.SimpleNamespace(
            measured=measured,
            remeasure=False,
            workdir=workdir,
            roofline=None,
            library=workdir / "build" / "candidate.so",
            worker_request=lambda: {"library": "candidate.so"},
        )
        stage = NcuProfile(attrs.evolve(NcuProfileConfig(), ncu=str(ncu), timeout_s=timeout_s))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        result = stage.evaluate(job)
        return result, time.monotonic() - started, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024

    return run


@pytest.mark.slow
def test_a_profiled_process_that_floods_its_output_gives_a_profile_failure_not_a_grown_hiera(fake_ncu):
    result, seconds, grown_mb = fake_ncu("flood")

    assert "no kernel" in result.profile.unavailable
    assert grown_mb < 200 and seconds < 60


@pytest.mark.slow
def test_the_table_after_a_flood_is_still_read(fake_ncu):
    result, _, _ = fake_ncu("flood-then-table")

    assert result.profile.unavailable is None and result.profile.metrics["kernel_count"] == 2


def test_the_candidate_cannot_mark_its_own_profile_unavailable(fake_ncu):
    result, _, _ = fake_ncu("false-error")

    assert result.profile.unavailable is None and result.profile.metrics["kernel_count"] == 2


def test_a_profiler_that_hangs_is_a_profile_failure_at_its_time_limit(fake_ncu):
    result, seconds, _ = fake_ncu("hang", timeout_s=2)

    assert result.profile.unavailable == "ncu timed out" and seconds < 15
