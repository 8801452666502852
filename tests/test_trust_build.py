"""Hostile candidates aimed at the build, not the run: an include that reads a file the model must not see, one
that never ends (a device, a FIFO, /proc), a log of any size, a library that is not a library. Each ends in a
verdict the model can act on, with its reason and without a byte of the outside file; an honest control still
builds. Host candidates go through the real pipeline (sandbox, compiler); the one cuda test is compile-only.
docs/security.md ("The compiler's sandbox") says what each part guarantees."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

import hiera_core
from hiera_core import EvalJob, records
from hiera_core.config import load_config
from hiera_core.engine import evaluate_source
from hiera_core.plugins import make_plugin_manager
from hiera_core.session import Session
from hiera_judge.sandbox import Handshake, library_problem, run_sandboxed

MARKER = "hiera-outside-secret-7f3a9c"
"""The content of every outside file a candidate tries to read: it must appear in no verdict and no log."""
HONEST = """\
#include <stdlib.h>
#include <string.h>
#include "stencil2d.h"

int hiera_stencil2d(int n, int radius, int steps, const double *weights, const double *in, double *out, double *scratch) {
    int k = 2 * radius + 1;
    (void)steps; (void)scratch;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (int di = -radius; di <= radius; di++)
                for (int dj = -radius; dj <= radius; dj++) {
                    int y = i + di, x = j + dj;
                    if (y >= 0 && y < n && x >= 0 && x < n) acc += weights[(di + radius) * k + (dj + radius)] * in[y * n + x];
                }
            out[i * n + j] = acc;
        }
    return 0;
}
"""
CHECKOUT = Path(hiera_core.__file__).resolve().parents[1]


def including(target: str, *, hidden: bool = False) -> str:
    """The honest candidate with one more include; `hidden` puts the path in a macro, out of a text scan's sight."""
    line = f'#define TARGET "{target}"\n#include TARGET\n' if hidden else f'#include "{target}"\n'
    return line + HONEST


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A folder beside the run's, as $HOME or another run's folder would be: a secret header and a FIFO."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "secret.h").write_text(f"/* {MARKER} */\nint {MARKER.replace('-', '_')};\n")
    os.mkfifo(folder / "pipe.h")
    return folder


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust-build")
    config = load_config(
        root,
        environ={},
        cli={"arch": "host"},
        overrides=[
            "workload.stencil2d.host_n=64",
            "workload.stencil2d.radius=1",
            "evaluator.host-compile.timeout_s=30",
        ],
    )
    return Session.create(config, make_plugin_manager()), root


def build(session, source: str, name: str):
    """The pipeline up to the device (static checks, the build): its verdict, the build log it left, seconds."""
    session, root = session
    started = time.monotonic()
    candidate, evaluation = evaluate_source(session, source, space="pure_cuda", workdir=root / name, device=False)
    log = root / name / candidate.id / "build.log"
    return evaluation, log.read_text() if log.exists() else "", time.monotonic() - started


def test_the_honest_control_still_builds(session):
    evaluation, _log, seconds = build(session, HONEST, "control")
    assert isinstance(evaluation, hiera_core.StagePassed), evaluation
    library = evaluation.job.library
    assert library.is_file() and not library.is_symlink()
    assert seconds < 30
    n, weights = 5, [0.0, 0.25, 0.0, 0.25, 0.0, 0.25, 0.0, 0.25, 0.0]
    grid, out, scratch = (ctypes.c_double * (n * n))(*range(n * n)), (ctypes.c_double * (n * n))(), (ctypes.c_double * (n * n))()
    assert ctypes.CDLL(str(library)).hiera_stencil2d(n, 1, 1, (ctypes.c_double * 9)(*weights), grid, out, scratch) == 0
    assert out[n + 1] == (1 + 5 + 7 + 11) / 4  # the four neighbours of (1, 1): what it was written to compute


@pytest.mark.parametrize("target", ["/etc/passwd", str(CHECKOUT / "pyproject.toml"), "OUTSIDE/secret.h", "../OUTSIDE/secret.h"])
@pytest.mark.parametrize("hidden", [False, True], ids=["literal", "macro"])
def test_an_include_outside_the_allowed_roots_is_rejected_before_compiling(session, outside, target, hidden):
    # relative: up from the candidate's folder (past / it stays at /), then down to the outside folder
    target = target.replace("../OUTSIDE", "../" * 20 + str(outside).lstrip("/")).replace("OUTSIDE", str(outside))
    evaluation, log, _ = build(session, including(target, hidden=hidden), "outside")
    assert isinstance(evaluation, records.StaticRejected), evaluation
    assert "outside" in evaluation.reason and os.path.basename(target) in evaluation.reason
    assert "never compiled" in evaluation.reason or "not compiled" in evaluation.reason
    for text in (evaluation.reason, log):
        assert MARKER not in text and "root:x:0:0" not in text and "[build-system]" not in text


@pytest.mark.parametrize(
    "target, words",
    [
        ("/dev/zero", "device"),
        ("/dev/stdin", "device"),
        ("/proc/self/environ", "/proc"),
        ("OUTSIDE/pipe.h", "FIFO"),
    ],
)
@pytest.mark.parametrize("hidden", [False, True], ids=["literal", "macro"])
def test_an_include_that_never_ends_is_rejected_in_bounded_time(session, outside, target, words, hidden):
    target = target.replace("OUTSIDE", str(outside))
    evaluation, log, seconds = build(session, including(target, hidden=hidden), "endless")
    assert isinstance(evaluation, (records.StaticRejected, records.CompileFailed)), evaluation
    reason = getattr(evaluation, "reason", None) or evaluation.log
    assert target in reason or words in reason, reason
    assert seconds < 60, seconds
    assert len(log) < 100_000


def test_what_the_assembler_reads_from_outside_stays_out_of_the_log(session, outside):
    """`.include` in inline assembly is no preprocessor include: the listing cannot see it (here the name is even
    split in two). The assembler's messages about the outside file are located there, and dropped from the log."""
    for target in ("/etc/passwd", str(outside / "secret.h")):
        source = HONEST + f'__asm__(".inc" "lude \\"{target}\\"");\n'
        evaluation, log, _ = build(session, source, "assembler")
        assert isinstance(evaluation, records.CompileFailed), evaluation
        for text in (evaluation.log, log):
            assert MARKER not in text and "root:x:0:0" not in text and "no such instruction" not in text
        assert "not shown" in log if target == "/etc/passwd" else "secret.h" in log  # the latter: hidden from it


def test_a_huge_compile_log_is_cut_to_its_head_and_tail(session):
    errors = "#define E0 int 0;\n" + "".join(f"#define E{i} E{i - 1} E{i - 1} E{i - 1} E{i - 1}\n" for i in range(1, 7))
    evaluation, log, _seconds = build(session, HONEST + errors + "E6\n", "huge-log")
    assert isinstance(evaluation, records.CompileFailed), evaluation
    assert "bytes of output dropped" in log and len(log.encode()) < 80_000
    assert "error" in evaluation.log and len(evaluation.log) <= 4000
    assert "\x1b" not in log


@pytest.mark.parametrize(
    "leaves, words",
    [
        ("directory", "a directory where the library should be"),
        ("symlink", "a symbolic link where the library should be"),
        ("nothing", "no library"),
    ],
)
def test_a_build_that_leaves_no_regular_library_gets_a_verdict(tmp_path, leaves, words):
    """A compiler that exits 0 but leaves a directory, a link or nothing at the library's path: a verdict on the
    candidate, never "evaluator failed" (the judge would have copied whatever was there)."""
    compiler = tmp_path / "cc"
    compiler.write_text(f"""#!/bin/sh
case " $* " in *" -shared "*) ;; *) exec cc "$@";; esac  # only the candidate's library is malformed
while [ "$#" -gt 1 ]; do [ "$1" = -o ] && out="$2"; shift; done
case {leaves} in directory) mkdir -p "$out";; symlink) ln -s /etc/passwd "$out";; esac
""")
    compiler.chmod(0o755)
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host"},
        overrides=["workload.stencil2d.host_n=64", f"arch.host.cc={json.dumps(str(compiler))}"],
    )
    session = Session.create(config, make_plugin_manager())
    _, evaluation = evaluate_source(session, HONEST, space="pure_cuda", workdir=tmp_path / "runs")
    assert isinstance(evaluation, records.CompileFailed), evaluation
    assert words in evaluation.log


def test_the_compiler_s_memory_and_file_size_are_limited_with_or_without_a_cgroup(tmp_path):
    eat = run_sandboxed(
        [sys.executable, "-c", "b = bytearray(1 << 30); print('allocated')"],
        cwd=tmp_path / "eat",
        timeout_s=60,
        memory_bytes=256 << 20,
    )
    assert eat.returncode != 0 and "allocated" not in eat.stdout
    write = run_sandboxed(
        [sys.executable, "-c", "open('big', 'wb').write(bytes(64 << 20)); print('written')"],
        cwd=tmp_path / "write",
        timeout_s=60,
        file_bytes=16 << 20,
    )
    assert write.returncode != 0 and "written" not in write.stdout
    assert (tmp_path / "write" / "big").stat().st_size <= 16 << 20


def test_a_program_with_a_handshake_holds_the_lock_from_its_ready_line_to_its_end_and_its_time_counts_from_go(tmp_path):
    """A profiler's start-up (~8 s a parent on an H100) no longer holds the GPU: the lock is taken when the program says
    it is ready, its `go` follows, and the lock is held until the program ends; neither the start-up nor the wait for
    the lock counts against its time-out."""
    program = (
        "import sys, time\n"
        "time.sleep(1.5)\n"  # the start-up: the lock is free meanwhile
        "print('request', sys.stdin.readline().strip(), flush=True)\n"
        "print('hiera-ready', flush=True)\n"
        "print('told', sys.stdin.readline().strip(), flush=True)\n"
        "time.sleep(2.0)\n"  # the work under the lock
        "print('hiera-ready', flush=True)\n"  # said again after `go`: nothing more happens
    )
    held: list[float] = []

    @contextlib.contextmanager
    def lock():
        time.sleep(1.5)  # another holder first
        held.append(time.monotonic())
        yield
        held.append(time.monotonic())

    started = time.monotonic()
    done = run_sandboxed(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        timeout_s=3,
        stdin='{"task": 1}\n',
        handshake=Handshake(ready="hiera-ready", go="go now", lock=lock()),
    )
    assert done.returncode == 0 and not done.timed_out, done.stderr
    assert 'request {"task": 1}' in done.stdout and "told go now" in done.stdout
    assert len(held) == 2 and held[0] - started >= 2.9  # taken after the start-up and its own wait
    assert held[1] - held[0] >= 2.0  # held through the work, to the end


def test_the_sandbox_keeps_a_bounded_printable_log(tmp_path):
    done = run_sandboxed(
        [sys.executable, "-c", "import sys; sys.stdout.write('head\\n' + 'x\\x1b[31m\\x07' * 10**7 + '\\ntail\\n')"],
        cwd=tmp_path,
        timeout_s=60,
        log_bytes=64 << 10,
    )
    assert done.returncode == 0 and done.stdout.startswith("head") and done.stdout.rstrip().endswith("tail")
    assert "bytes of output dropped" in done.stdout and len(done.stdout) < 70_000
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout


def test_the_compiler_sees_no_home_no_checkout_and_no_other_run(tmp_path, outside):
    """Mount-level: outside the allowed roots a compiler cannot even read (the include check is the guarantee;
    this is the second wall)."""
    home = Path(os.path.expanduser("~")) / "hiera-probe"
    home.write_text(MARKER)
    mine = tmp_path / "build" / "mine"
    mine.parent.mkdir()
    mine.write_text("mine")
    probe = "import os, sys; print(*(p for p in sys.argv[1:] if os.path.exists(p)))"
    secrets = [str(outside / "secret.h"), str(CHECKOUT / "pyproject.toml"), str(home), "/root/.bashrc", "/dev/zero"]
    seen = run_sandboxed([sys.executable, "-c", probe, *secrets, str(mine)], cwd=mine.parent, timeout_s=60, hide_outside=True)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == [str(mine)], seen.stdout
    assert os.path.exists(secrets[0]) and home.exists()  # there, outside the sandbox


@pytest.mark.parametrize("became", ["symlink", "directory"])
def test_a_cached_library_that_is_no_longer_a_regular_file_is_never_reused(tmp_path, became):
    """The content-addressed cache: a record whose library became a link (to /etc/passwd: the judge would copy
    that) or a folder is built again, never handed on; a regular file is reused."""
    from hiera_plugins.cuda.build import build_candidate, cache_key, module_name

    contract = records.Contract(source_filename="cuda_source.cpp", interface="")
    candidate = records.Candidate(id="c", source="// nothing", space="pure_cuda", round=1)
    toolchain = {"cache_dir": str(tmp_path / "cache"), "cuda_home": "/nonexistent", "arch_list": "9.0", "cuda_cflags": []}
    job = EvalJob(
        candidate=candidate,
        task=records.Task(workload="w", name="t"),
        contract=contract,
        arch="cuda",
        space_rank=0,
        workdir=tmp_path / "w",
        workload_factory="x:Y",
        workload_config={},
        toolchain=toolchain,
    )
    folder = tmp_path / "cache" / cache_key(job)
    folder.mkdir(parents=True)
    library = folder / f"{module_name(job)}.so"
    library.symlink_to("/etc/passwd") if became == "symlink" else library.mkdir()
    (folder / "build.json").write_text(json.dumps({"library": str(library), "log": "", "resources": {}}))
    built = build_candidate(job, timeout_s=300)  # without torch it fails; with it, a C++ extension of nothing builds
    assert not built.cache_hit
    assert built.library is None or library_problem(built.library, max_bytes=1 << 30) is None
    assert not library.is_symlink() and not library.is_dir()

    library.write_bytes(b"\x7fELF")
    (folder / "build.json").write_text(json.dumps({"library": str(library), "log": "", "resources": {}}))
    again = build_candidate(job, timeout_s=120)
    assert again.cache_hit and again.library == library


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")
@pytest.mark.timeout(900)
def test_a_cuda_include_hidden_from_the_host_pass_is_rejected_before_compiling(tmp_path):
    """Compile-only, one nvcc dependency listing (no full build): an include that only the device pass
    (`__CUDA_ARCH__`) sees, its name in a macro (out of the text scan's sight), of a file the sandbox still shows
    (/etc) is found: nvcc -M runs every pass the build runs."""
    from hiera_plugins.cuda.architecture import CudaArchitecture, CudaConfig, find_cuda_home

    if find_cuda_home() is None:
        pytest.skip("no CUDA toolkit")
    sys.path.insert(0, str(Path(__file__).parent / "plugins"))
    from gpu_tasks import SEEDS, TinyOps

    from hiera_plugins.cuda.build import build_candidate

    toolchain = CudaArchitecture(CudaConfig(cache_dir=str(tmp_path / "cache"))).toolchain()
    workload = TinyOps(None)
    task = workload.tasks()[1]
    source = '#define OUTSIDE "/etc/passwd"\n#ifdef __CUDA_ARCH__\n#include OUTSIDE\n#endif\n' + SEEDS["matmul"]
    job = EvalJob(
        candidate=records.Candidate(id="cu", source=source, space="pure_cuda", round=1),
        task=task,
        contract=workload.contract(task, "cuda"),
        arch="cuda",
        space_rank=0,
        workdir=tmp_path / "w",
        workload_factory="gpu_tasks:TinyOps",
        workload_config={},
        toolchain=toolchain,
    )
    started = time.monotonic()
    built = build_candidate(job, timeout_s=600)
    assert built.library is None and built.rejected and "/etc/passwd" in built.rejected, built.log[-3000:]
    assert "not compiled" in built.rejected and "root:x:0:0" not in built.rejected + built.log
    assert time.monotonic() - started < 120  # rejected by the listing, before the ~65 s compile
