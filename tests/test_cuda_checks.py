"""The cuda evaluator's checks that need no GPU: source scans, one real extension build, binary symbols."""

import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).parent / "plugins"))

import itertools

from adversarial import CANDIDATES, CUBLAS_HIDDEN
from gpu_tasks import SEEDS, TinyOps

from hiera_core import EvalJob
from hiera_core.records import Candidate
from hiera_judge.source_rules import violation
from hiera_plugins.cuda import checks
from hiera_plugins.cuda.architecture import CudaArchitecture, CudaConfig, find_cuda_home
from hiera_plugins.cuda.build import build_candidate, compiler_errors
from hiera_plugins.spaces import CudaLibraries, LibrariesPytorch, PureCuda

RANK = {s.name: s.rank for s in (PureCuda, CudaLibraries, LibrariesPytorch)}
STATIC = {name: c for name, c in CANDIDATES.items() if c[3] == "static_rejected" and name != "dispatcher-in-pure"}


def _static_reason(space, source):
    return violation(source, checks.SOURCE_RULES, RANK[space]) or checks.hack_in_source(source, "float32")


@pytest.mark.parametrize("name", sorted(STATIC))
def test_a_hack_visible_in_the_source_is_rejected_before_compiling(name):
    _task, space, source, _kind, words = STATIC[name]
    reason = _static_reason(space, source)
    assert reason is not None and words in reason


@pytest.mark.parametrize("name", sorted(set(CANDIDATES) - set(STATIC)))
def test_hacks_that_only_running_reveals_pass_the_source_scan(name):
    _task, space, source, _kind, _words = CANDIDATES[name]
    assert _static_reason(space, source) is None


def test_the_seeds_pass_every_static_check():
    for source in SEEDS.values():
        assert _static_reason("pure_cuda", source) is None


def test_a_candidate_that_changes_the_precision_settings_is_rejected():
    """TF32 or reduced-precision math switched on from the candidate trades the contract's FP32 for speed, and
    reaches the reference too (one process); choosing cuDNN's algorithm by timing leaves the precision alone."""
    forward = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x, torch::Tensor w) {{\n    {}\n    return at::conv2d(x, w);\n}}\n"
    reason = _static_reason("libraries_pytorch", forward.format("at::globalContext().setAllowTF32CuDNN(true);"))
    assert reason is not None and "precision settings" in reason and "setAllowTF32CuDNN(" in reason
    assert _static_reason("libraries_pytorch", forward.format("at::globalContext().setBenchmarkCuDNN(true);")) is None


def test_runtime_space_rules():
    assert checks.runtime_space_violation(["scale_add(float const*, float const*, float*, long)"], ["empty_like"], 0) is None
    assert "library kernels" in checks.runtime_space_violation(["sm90_xmma_gemm_f32f32_tf32f32"], [], 0)
    assert checks.runtime_space_violation(["sm90_xmma_gemm_f32f32_tf32f32"], [], 1) is None
    assert "ATen operators mm" in checks.runtime_space_violation([], ["mm", "empty"], 1)
    assert checks.runtime_space_violation([], ["mm"], 2) is None
    # what torch::zeros and .contiguous() launch is admitted with them (task 15's candidates, H100, 2026-12-07)
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int)"
    copy = (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(int)"
    )
    assert checks.runtime_space_violation([fill, copy], ["zeros", "contiguous"], 0) is None
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int)"
    assert "CUDAFunctor_add" in checks.runtime_space_violation([fill, add], ["zeros"], 0)


def test_a_pure_cuda_kernel_named_like_a_librarys_is_the_candidates_own(tmp_path):
    """KernelBench level 1 task 4 on an H100 (2026-12-07): four of a model's six pure CUDA candidates were rejected as
    launching "library kernels" because their own kernels were called `gemv_splitk_vec4_kernel` and
    `(anonymous namespace)::gemv_finish_kernel`. A kernel the candidate's library defines is its own; cuBLAS's, or an
    ATen kernel instantiated from a header into the library, is not. (A candidate that defines a function of
    cuBLAS's kernel's name passes this check; calling cuBLAS at all is what the binary check stops:
    `test_a_real_extension_build_its_symbols_and_the_cache`.)"""
    (tmp_path / "k.cpp").write_text(  # a shared object with the host stubs nvcc writes for these kernels
        "namespace { void gemv_finish_kernel(const float*, float*, int) {} }\n"
        "template <int N> void gemv_splitk_vec4_kernel(const float*, float*) {}\n"
        "namespace at { namespace native { template <int N> void vectorized_elementwise_kernel(float*) {} } }\n"
        "void launch(float* o) { gemv_finish_kernel(o, o, 1); gemv_splitk_vec4_kernel<4>(o, o);"
        " at::native::vectorized_elementwise_kernel<4>(o); }\n"
    )
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-o", tmp_path / "k.so", tmp_path / "k.cpp"], check=True)
    own = checks.defined_functions(tmp_path / "k.so")
    assert {"gemv_finish_kernel", "gemv_splitk_vec4_kernel", "launch"} <= own

    mine = [
        "(anonymous namespace)::gemv_finish_kernel(float const*, float*, int)",
        "void gemv_splitk_vec4_kernel<4>(float const*, float*)",
    ]
    assert checks.runtime_space_violation(mine, ["empty"], 0, own) is None
    assert "library kernels" in checks.runtime_space_violation(mine, [], 0)  # not defined there: as before
    cublas = "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float const*)"
    assert "gemv2T_kernel_val" in checks.runtime_space_violation([*mine, cublas], [], 0, own)
    aten = "void at::native::vectorized_elementwise_kernel<4>(float*)"
    assert "vectorized_elementwise" in checks.runtime_space_violation([aten], [], 0, own)
    assert checks.kernel_base_name("void ns::f<(int)4, g<2>>(float const*, h<3>)") == "f"


def test_a_library_that_imports_its_own_stream_or_the_drivers_functions_is_rejected(tmp_path):
    """The binary check sees what a macro hides from the source scan (the GPU suite's `driver-stream-hidden` is the
    real attack); two small shared objects, built here, stand for a candidate's library."""

    def shared_object(name, body):
        (tmp_path / f"{name}.c").write_text(body)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", tmp_path / f"{name}.so", tmp_path / f"{name}.c"], check=True)
        return tmp_path / f"{name}.so"

    escape = shared_object(
        "escape",
        "int cudaGetDriverEntryPointByVersion(const char*, void**, unsigned, unsigned long long, int*);\n"
        'void *probe(void) { void *f = 0; cudaGetDriverEntryPointByVersion("cuStreamCreate", &f, 12000, 0, 0); return f; }\n',
    )
    reason = checks.binary_hack(checks.imported_symbols(escape))
    assert reason is not None and "cudaGetDriverEntryPointByVersion" in reason and "timer" in reason
    pooled = tmp_path / "pooled.cpp"  # PyTorch's inter-op pool runs a function in a thread too: g++ names the import
    pooled.write_text(
        "#include <functional>\nnamespace at { void launch(std::function<void()> f); }\nvoid later() { at::launch([] {}); }\n"
    )
    subprocess.run(["g++", "-shared", "-fPIC", "-o", tmp_path / "pooled.so", pooled], check=True)
    reason = checks.binary_hack(checks.imported_symbols(tmp_path / "pooled.so"))
    assert reason is not None and "at::launch" in reason
    assert "starts a thread" in _static_reason("libraries_pytorch", pooled.read_text())  # where ATen calls are admitted
    honest = shared_object(
        "honest", "#include <string.h>\nvoid copy(char *a, const char *b, unsigned long n) { memcpy(a, b, n); }\n"
    )
    assert checks.binary_hack(checks.imported_symbols(honest)) is None


@pytest.mark.slow
@pytest.mark.skipif(find_cuda_home() is None, reason="no CUDA toolkit")
@pytest.mark.timeout(1200)  # three real builds of 60-100 s each on a 2-core machine, more when others build
def test_a_real_extension_build_its_symbols_and_the_cache(tmp_path):
    """Compile-only (no GPU): cuBLAS hidden from the source scan is found in the built library's symbols;
    a compiler error is kept for the next prompt; an identical candidate is a cache hit."""
    arch = CudaArchitecture(CudaConfig(cache_dir=str(tmp_path / "cache")))
    toolchain = arch.toolchain()
    workload = TinyOps(None)
    task = workload.tasks()[1]
    contract = workload.contract(task, "cuda")

    def job(source, name):
        candidate = Candidate(id=name, source=source, space="pure_cuda", round=1)
        workdir = tmp_path / name
        workdir.mkdir()
        return EvalJob(
            candidate=candidate,
            task=task,
            contract=contract,
            arch="cuda",
            space_rank=0,
            workdir=workdir,
            workload_factory="gpu_tasks:TinyOps",
            workload_config={},
            toolchain=toolchain,
        )

    assert _static_reason("pure_cuda", CUBLAS_HIDDEN) is None
    built = build_candidate(job(CUBLAS_HIDDEN, "hidden"), timeout_s=900)
    assert built.library is not None, built.log[-3000:]
    assert not built.cache_hit
    assert built.resources["keep"]["registers"] > 0  # ptxas -v, per kernel
    assert "cublasSgemm_v2" in checks.library_calls(checks.imported_symbols(built.library))
    assert "cublasSgemm_v2" in checks.binary_space_violation(checks.imported_symbols(built.library), 0)
    assert checks.binary_space_violation(checks.imported_symbols(built.library), 1) is None

    started = time.perf_counter()
    again = build_candidate(job(CUBLAS_HIDDEN, "hidden-again"), timeout_s=900)
    assert again.cache_hit and again.library == built.library and time.perf_counter() - started < 2

    broken = build_candidate(job(SEEDS["matmul"].replace("acc += ", "acc += undefined_name + "), "broken"), timeout_s=900)
    assert broken.library is None
    assert "undefined_name" in compiler_errors(broken.log) and "error" in compiler_errors(broken.log)

    # --no-contract: no frozen binding; the candidate binds `forward` itself
    whole = SEEDS["matmul"] + '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n'
    open_job = attrs.evolve(job(whole, "no-contract"), contract=contract.without_binding())
    built = build_candidate(open_job, timeout_s=900)
    assert built.library is not None, built.log[-3000:]
    probe = f"import torch, importlib.util as u; s = u.spec_from_file_location('{built.library.name.split('.')[0]}', '{built.library}'); m = u.module_from_spec(s); s.loader.exec_module(m); print(hasattr(m, 'forward'))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "True"


def test_without_the_contract_the_candidate_writes_the_binding():
    contract = TinyOps(None).contract(TinyOps(None).tasks()[0], "cuda")
    open_contract = contract.without_binding()
    assert "cpp_source.cpp" not in open_contract.files and open_contract.binding is None
    assert "PYBIND11_MODULE" in open_contract.interface and "must also bind" in open_contract.interface
    assert open_contract.id != contract.id


def _batches(per_call_ms: list[float], calls: int = 10) -> list:
    from hiera_judge.judging import TimedBatch

    return [TimedBatch(calls=calls, wall_ms=1.0 + calls * t, in_process_ms=[t] * calls) for t in per_call_ms]


def test_adaptive_timing_stops_when_the_mean_is_known_well_enough():
    from hiera_judge.judging import NullBatches
    from hiera_plugins.cuda.evaluators import CudaRunConfig
    from hiera_plugins.cuda.judge import MIN_BATCHES, timing_done

    null = NullBatches(one_ms=[1.0], full_ms=[1.0], calls=10)  # 1 ms of protocol a batch
    fixed = CudaRunConfig(repeats=100, target_rse=0.005, max_repeats=500, min_repeats=3, timing_budget_s=2.0)
    adaptive = attrs.evolve(fixed, adaptive=True)
    steady, noisy = _batches([1.0, 1.001] * 5), _batches([1.0, 2.0] * 5)

    def done(batches, timing):
        return timing_done(10 * len(batches), len(batches), sum(b.wall_ms for b in batches), batches, null, timing)

    assert not done(steady[:9], fixed) and done(steady, fixed) and done(noisy, fixed)  # 100 calls
    assert done(steady, adaptive) and not done(noisy, adaptive)
    assert done(_batches([1.0, 2.0] * 25), adaptive)  # max_repeats
    assert not done(steady[: MIN_BATCHES - 1], attrs.evolve(fixed, repeats=10))  # never fewer batches than MIN_BATCHES


def test_slow_calls_are_timed_until_the_budget_by_the_judges_clock():
    from hiera_judge.judging import NullBatches
    from hiera_plugins.cuda.evaluators import CudaRunConfig
    from hiera_plugins.cuda.judge import timing_done

    null = NullBatches(one_ms=[1.0], full_ms=[1.0], calls=2)
    timing = CudaRunConfig(repeats=100, target_rse=0.005, max_repeats=1000, min_repeats=10, timing_budget_s=2.0)
    slow = _batches([120.0] * 9, calls=2)  # stencil2d's conv2d baseline: 2.17 s in 18 calls, two a batch

    def done(batches):
        return timing_done(2 * len(batches), len(batches), sum(b.wall_ms for b in batches), batches, null, timing)

    assert done(slow) and not done(slow[:8])  # the budget is the judge's clock: 1.93 s after 8 batches
    assert not done(_batches([300.0] * 4, calls=2))  # never fewer than min_repeats calls


def test_calls_rotate_over_places_of_their_own_within_the_gpus_free_memory():
    """The judge's calls rotate over several places for inputs and output, so that one process's figure is not
    one placement's; each place has pages of its own, the inputs at another offset against the output each time;
    a task too large for several places beside what its checks need gets one, and one too large for that says so
    (before the candidate is loaded) instead of running the GPU out of memory in a timed call."""
    from hiera_plugins.cuda.judge import ALIGN, PLACEMENT_BYTES, memory_plan

    gib = 2**30
    free = 137 * gib  # an H200's, with the judge's and the runner's contexts up
    grid = 10240 * 10240 * 8  # stencil2d's task: one FP64 grid in, one out
    plan = memory_plan(grid, grid, 2 * grid, free, 4)
    assert plan.places == 4
    starts = [(k * plan.in_stride, k * plan.out_stride) for k in range(plan.places)]
    assert all(b[0] - a[0] >= grid and b[1] - a[1] >= grid for a, b in itertools.pairwise(starts))  # no overlap
    assert len({(i - o) % 2**21 for i, o in starts}) == plan.places  # the input lies elsewhere against the output each time
    assert all(i % ALIGN == 0 and o % ALIGN == 0 for i, o in starts)
    assert memory_plan(grid, grid, 0, free, 1).places == 1 and memory_plan(100, 4, 0, free, 4).places == 4
    assert memory_plan(PLACEMENT_BYTES // 3, PLACEMENT_BYTES // 3, 0, free, 4).places == 1  # the cap: 64 GiB of places
    assert memory_plan(44 * gib, 12 * gib, 0, free, 4).places == 1  # one place over the cap: one, where it fits
    # KernelBench level 1 task 36 (RMSNorm, 7.5 GiB in and out; its FP64 reference works in ~45 GiB): two places
    # (30 GiB here, 15 in the runner) beside 83.5 GiB for a check
    assert memory_plan(int(7.5 * gib), int(7.5 * gib), 45 * gib, free, 1024).places == 2
    assert memory_plan(int(7.5 * gib), int(7.5 * gib), 45 * gib, free - 40 * gib, 1024).places == 0
    too_large = memory_plan(20 * gib, 20 * gib, 80 * gib, free, 1024)
    assert too_large.places == 0 and "is more than the 137.0 GiB free" in too_large.why, too_large.why
    # an 80 GB H100 (74.4 GiB free, 79.2 in all; 2026-12-06 its references ran out of memory beside 64 GiB of places):
    # half the GPU at most, 7.9 GiB left to the judges and runners beside it
    h100 = memory_plan(grid, grid, 2 * grid, int(74.4 * gib), 1024, total=int(79.2 * gib))
    assert h100.places == 16 and h100.places * (h100.in_stride + 2 * h100.out_stride) < 39.6 * gib
    assert memory_plan(grid, grid, 2 * grid, free, 1024, total=140 * gib).places == 27  # an H200: the 64 GiB cap as before
    short = memory_plan(20 * gib, 20 * gib, 0, 60 * gib, 1, total=int(79.2 * gib))
    assert short.places == 0 and "free less 7.92 GiB more left to other processes" in short.why
    # what the others hold already counts towards their share, once: KernelBench level 1 task 20 (LeakyReLU, 6 GiB in
    # and out) beside three runs' judges holding 7.2 GiB fits, as it does alone
    task_20 = (6 * gib, 6 * gib, 25 * gib, int(71.5 * gib), 1)  # 67.5 GiB for one place and a check
    assert memory_plan(*task_20, total=int(79.2 * gib), others_use=int(7.2 * gib)).places == 1
    assert memory_plan(*task_20, total=int(79.2 * gib)).places == 0  # had they held nothing, 7.92 GiB more is theirs
    # short of room beside others is not too large for the GPU: only a task that would not fit on an empty one ends its run
    crowded = memory_plan(6 * gib, 6 * gib, 25 * gib, int(50 * gib), 1, total=int(79.2 * gib), others_use=int(28 * gib))
    assert crowded.places == 0 and not crowded.too_large
    assert short.too_large and too_large.too_large
    # task 20 alone on an H100 (2026-12-07): 71.458 GiB free while the judge held the timing sample's 6 GiB, its own and
    # its runner's contexts 1.47 GiB: too large for the card. The sample is made again where used, so the judge finds
    # those 6 GiB free too, and one place fits
    held = memory_plan(6 * gib, 6 * gib, 24 * gib, int(71.458 * gib), 1, total=int(79.2 * gib), others_use=int(1.47 * gib))
    assert held.places == 0 and held.too_large
    alone = memory_plan(6 * gib, 6 * gib, 24 * gib, int(77.458 * gib), 1, total=int(79.2 * gib), others_use=int(1.47 * gib))
    assert alone.places == 1
    # and beside the five other judges `judges_per_gpu` lets wait on the card (1.47 GiB each, as this one's)
    beside = memory_plan(6 * gib, 6 * gib, 24 * gib, int(70.1 * gib), 1, total=int(79.2 * gib), others_use=int(7.35 * gib))
    assert beside.places == 1


def test_outputs_are_compared_in_chunks_with_the_same_verdict():
    """Large outputs are compared a chunk at a time (whole-tensor FP64 temporaries ran the H200 out of
    memory on KernelBench level 1 task 38); the verdict and the first bad element do not depend on it."""
    import torch

    from hiera_plugins.cuda.judge import max_error

    torch.manual_seed(0)
    reference = torch.randn(37, 29, dtype=torch.float64) * 3
    good = reference.float()
    bad = good.clone()
    bad[20, 5] += 0.5
    bad[30, 1] += 1.0
    broken = good.clone()
    broken[36, 28] = float("nan")
    infinite = good.clone()
    infinite[0, 0] = float("inf")
    large = reference.clone()  # one large value: its error is past atol x rms but inside its rtol share
    large[3, 3] = 1e4
    near = large.float()
    near[3, 3] += 0.5
    for chunk in (7, 64, 10**6):
        error, first = max_error(good, reference, 1e-4, 1e-4, chunk=chunk)
        assert first is None and 0 < error < 1e-5
        error, first = max_error(bad, reference, 1e-4, 1e-4, chunk=chunk)
        assert first == 20 * 29 + 5 and error == pytest.approx(1.0, abs=1e-5)
        assert max_error(broken, reference, 1e-4, 1e-4, chunk=chunk)[1] == "non-finite"
        assert max_error(infinite, reference, 1e-4, 1e-4, chunk=chunk)[1] == "non-finite"
        assert max_error(near, large, 1e-4, 1e-4, chunk=chunk) == (pytest.approx(0.5, abs=1e-5), None)
        assert max_error(near, large.float(), 1e-4, 1e-6, chunk=chunk)[1] is None  # FP32 on both sides
        assert max_error(near, large, 1e-5, 1e-4, chunk=chunk)[1] == 3 * 29 + 3


def _run_stage_job():
    """What the cuda run stage reads of a job, for a stage whose judges are stand-ins."""
    import types

    return types.SimpleNamespace(
        workload_factory="w:f",
        workload_config={},
        task=None,
        remeasure=False,
        reference_ms=None,
        compiled_reference=False,
        workdir=Path("."),
        background=False,
        candidate=types.SimpleNamespace(id="c"),
    )


def test_judges_alive_on_a_gpu_are_bounded_and_the_next_starts_when_one_ends(monkeypatch):
    """A round's judges all starting beside their builds held two CUDA contexts each (~1 GiB) while they waited for
    the GPU: with `judges_per_gpu` alive, a candidate's judge starts only when one ends, whatever the round's size."""
    import threading

    from hiera_plugins.cuda import evaluators

    started = []

    class Judge:
        def __init__(self, *args, slot, **kwargs):
            self.slot = slot
            started.append(self)

    monkeypatch.setattr(evaluators, "StartedJudge", Judge)
    stage = evaluators.CudaRun(evaluators.CudaRunConfig(device=91, judges_per_gpu=2, compile_baseline=False))
    job = _run_stage_job()
    first, second = stage.start(job), stage.start(job)
    assert first and second and stage.start(job) is None  # the third starts in its stage, not beside its build
    first.started.slot()
    first.started.slot()  # given back once, however often it is called
    third = stage.start(job)
    assert third and stage.start(job) is None
    waiting = threading.Thread(target=stage.start, args=(job,), kwargs={"wait": True})
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and len(started) == 3
    second.started.slot()
    waiting.join(5)
    assert not waiting.is_alive() and len(started) == 4


def test_builds_run_a_few_at_a_time_and_a_stop_ends_the_wait_for_a_place(monkeypatch):
    """24 builds started at once on 16 cores all ended ~145 s later, the GPU idle until then: a process builds one
    candidate per two of its cores beside the timing ones (two at least), the others wait, and a stopping run stops
    waiting."""
    import threading

    from hiera_judge import judging
    from hiera_plugins.cuda import build

    places = build.build_places(14)  # an H100 machine's 16 cores, 2 kept for timing
    taken = [places.acquire(blocking=False) for _ in range(8)]
    assert taken == [True] * 7 + [False]
    for _ in range(7):
        places.release()
    monkeypatch.setattr(judging, "cores_beside_timing", lambda: 3)  # 2 places: never fewer
    two = build.build_places(3)
    assert two.acquire(blocking=False) and two.acquire(blocking=False)
    outcome = []

    def wait():
        try:
            with build.build_place():
                outcome.append("built")
        except judging.Interrupted:
            outcome.append("stopped")

    waiting = threading.Thread(target=wait)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and not outcome
    judging.interrupt_waits()
    try:
        waiting.join(2)
        assert outcome == ["stopped"]
    finally:
        judging.allow_waits()
        two.release()
    with build.build_place():  # the place given back is taken again
        assert not two.acquire(blocking=False)
    two.release()


def test_a_candidate_whose_judge_ran_out_of_gpu_memory_itself_is_judged_again_once(monkeypatch, tmp_path):
    """Four of task 4's candidates were recorded as crashed when their judges' own FP64 references found no room: a
    judge's own out-of-memory gives the candidate a second judge, whose answer stands; its own crash is not retried."""

    from hiera_core.records import Crashed, Measured
    from hiera_plugins.cuda import evaluators

    own = Crashed(reason=f"{evaluators.JUDGE_OUT_OF_MEMORY} (asking 16.00 GiB): it held 40.3 GiB, ...")
    mine = Crashed(reason="CUDA error: an illegal memory access was encountered", signal="SIGSEGV")
    measured = Measured(
        latency_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0, repeats=10, reference_latency_ms=2.0, max_abs_error=0.0
    )
    answers: list = []

    class Judge:
        def __init__(self, *args, slot, **kwargs):
            self.slot = slot

        def evaluate(self, job):
            self.slot()
            (job.workdir / "judge.log").write_text(f"judge {len(answers)}")
            return answers.pop(0)

    monkeypatch.setattr(evaluators, "StartedJudge", Judge)
    stage = evaluators.CudaRun(evaluators.CudaRunConfig(device=92, judges_per_gpu=1, compile_baseline=False))
    job = _run_stage_job()
    job.workdir = tmp_path
    answers[:] = [own, measured]
    assert stage.evaluate(job) == measured and not answers
    assert (tmp_path / "out-of-memory-judge.log").read_text() == "judge 2"  # the first judge's log is kept
    assert (tmp_path / "judge.log").read_text() == "judge 1"
    answers[:] = [own, own, measured]
    assert stage.evaluate(job) == own and answers == [measured]  # once only
    answers[:] = [mine, measured]
    assert stage.evaluate(job) == mine and answers == [measured]  # the candidate's own crash stands


def test_a_judge_out_of_gpu_memory_says_it_was_its_own_not_the_candidates(monkeypatch):
    """KernelBench level 1 task 4 on an H100 (2026-12-07): the judge's 16 GiB FP64 reference did not fit, and four
    candidates were recorded as crashing with CUDA's message; the model then forbade allocations in its next strategy."""
    import torch

    from hiera_plugins.cuda import judge

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (14 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 57 * 2**30)
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 79 GiB")
    reason = judge._own_out_of_memory(error)
    assert reason.startswith("the judge ran out of GPU memory for its own work (asking 16.00 GiB)")
    assert "it held 57.0 GiB" in reason and "other judges) 9.0 GiB" in reason and "14.0 GiB of 80.0 were free" in reason
    assert "the candidate's call had not failed" in reason
