"""What crosses the judge's boundaries: hiera's request, the judge's orders to its runner, the runner's replies and
the judge's answer (`hiera_judge.judging`). Each is a frozen record encoded by the one converter; the unions are
tagged by a `kind` field, registered here."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import attrs
from cattrs.strategies import configure_tagged_union

from hiera_core.records import Crashed, Incorrect, Measured, Profile, Rejected, Task, TimedOut
from hiera_core.serialization import get_converter, tag

JudgeSettings = TypeVar("JudgeSettings")


@attrs.frozen(kw_only=True)
class JudgeRequest(Generic[JudgeSettings]):
    """What hiera asks an architecture's judge: evaluate one candidate of one task (its built library, which only the
    runner loads, comes later, with `go`: the judge starts while the candidate builds)."""

    workload_factory: str
    """`module:Class@DIR` of the workload, so the judge (and the runner) can rebuild its harness."""
    workload_config: dict[str, Any]
    task: Task
    remeasure: bool = False
    settings: JudgeSettings
    """The architecture's own record of what its judge is told (its run stage's config and what the job adds); the
    judge reads it back as that class (`judging.read_request`)."""


@attrs.frozen(kw_only=True)
class Judged:
    """The judge's answer for a candidate it found correct on every check: the measurement as the run records it, and
    what the judge saw that only the stages after it read."""

    measurement: Measured
    """The figures as the judge took them; the stages after the judge add what they know (`record`)."""
    checked_timed_calls: int = 0
    """Timed calls (on fresh inputs) whose outputs the judge compared, chosen in secret."""
    metrics: dict[str, float] = attrs.field(factory=dict)
    """Architecture-specific figures for the profile (claims of the runner's where they come from it)."""
    kernels: list[str] = attrs.field(factory=list)
    """GPU kernels one call ran, as the runner's profiler saw them (the runtime space check reads them)."""
    aten_ops: list[str] = attrs.field(factory=list)

    def record(
        self, *, compile_s: float, profile: Profile | None, resources: dict[str, dict[str, int]] | None = None
    ) -> Measured:
        """The evaluation record of this verdict, with what the other stages knew (build time, profile, ...)."""
        m = self.measurement
        return attrs.evolve(
            m,
            checks=[*m.checks, f"{self.checked_timed_calls} timed calls on fresh inputs"],
            compile_s=compile_s,
            profile=profile,
            resources=resources or {},
        )


JudgeAnswer = Judged | Incorrect | Crashed | TimedOut | Rejected
"""A judge's last line: the verdict on one candidate."""


@attrs.frozen(kw_only=True)
class BufferView:
    """Where one array lies in a buffer the judge shares with the runner."""

    offset_bytes: int
    shape: list[int]
    dtype: str


@attrs.frozen(kw_only=True)
class LoadOrder:
    """Load the candidate (from here on the runner is untrusted) and the workload's harness."""

    workload_factory: str
    workload_config: dict[str, Any]
    task: Task
    library: str


@attrs.frozen(kw_only=True)
class CallOrder:
    """Call the candidate once on the arrays the judge wrote, into the output buffer; `null` calls nothing
    (the judge calibrates the protocol's own overhead with it, before the candidate is loaded)."""

    case: dict[str, Any]
    inputs: dict[str, BufferView]
    output: BufferView
    null: bool = False
    flush_cache: bool = True
    inspect: bool = False
    """Also record which GPU kernels and operators the call ran (`Inspected`)."""


@attrs.frozen(kw_only=True)
class AttachOrder:
    """Open the judge's shared buffers (on a GPU: CUDA IPC handles, pickled and base64-encoded by the judge)."""

    handles: str
    places: int = 1
    """How many places the judge's calls rotate over: the runner keeps the candidate's last `places - 1` outputs
    alive, so that its allocator hands each call's output a block of its own, in rotation, as well."""


@attrs.frozen(kw_only=True)
class BatchOrder:
    """The next batch: one call of the candidate per entry of `calls`, each on its own place's inputs. The runner only
    prepares it (the views of every place, its timers) and answers `Prepared`, outside the judge's clock and before the
    judge writes the inputs, so nothing of this batch's data is there yet; `StartBatch` runs it. `null` calls nothing:
    the judge calibrates the protocol's own cost with null batches before the candidate is loaded."""

    calls: list[CallOrder]
    null: bool = False


@attrs.frozen(kw_only=True)
class StartBatch:
    """Run the prepared batch: the calls back to back, with no wait between them (their inputs, written by the judge
    while the candidate was stopped, never seen before); reply when all are done. The judge's clock around this order
    is the figure (`hiera_judge.judging.timing_verdict`). Each output stays where the candidate put it: on a GPU the
    reply says where (`BatchDone.outputs`) and the judge reads it itself; on the host it is written into the call's
    output place."""


Order = AttachOrder | LoadOrder | CallOrder | BatchOrder | StartBatch


@attrs.frozen(kw_only=True)
class Ready:
    """The runner is up (interpreter, imports, device context): its first line, before any order."""


@attrs.frozen(kw_only=True)
class Loaded:
    pass


@attrs.frozen(kw_only=True)
class Prepared:
    """The runner holds the `BatchOrder`'s calls, ready to run them at `StartBatch`."""


@attrs.frozen(kw_only=True)
class CallDone:
    """The call returned and its output is in the judge's buffer (a claim; the judge checks it)."""

    in_process_ms: float
    """What the runner's own timer says the call took (CUDA events, or its wall clock)."""
    kernels: list[str] = attrs.field(factory=list)
    aten_ops: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class CallFailed:
    reason: str
    raised: bool = False
    """The candidate's call raised (a CUDA error, a wrong signature) rather than returning something unusable."""


@attrs.frozen(kw_only=True)
class BatchDone:
    """Every call of a `BatchOrder` returned (a claim: the judge's clock, its idle probe and its checks decide)."""

    in_process_ms: list[float]
    """What the runner's own timer says each call took (on a GPU: CUDA events around the whole batch, shared out
    evenly): a diagnostic, compared with the judge's figure."""
    handles: list[str] = attrs.field(factory=list)
    """On a GPU, the CUDA IPC handles (hex) of the allocations that hold the calls' outputs."""
    outputs: list[list[int]] = attrs.field(factory=list)
    """On a GPU, where each call's output lies: [the index of its allocation's handle in `handles`, its byte offset
    in that allocation] (plain integers: the reply is written inside the judge's clock). The judge opens each handle
    itself, checks every range lies inside the allocation, and copies the bytes out; nothing else in it is believed.
    Empty on the host, where outputs land in the judge's places."""
    stamps: list[float] = attrs.field(factory=list)
    """The runner's `time.perf_counter()` (CLOCK_MONOTONIC) as it began the batch, before the first call, after the
    last (on a GPU: after the final synchronize) and before replying: a claim, only for the judge's log of where its
    clock went (`judging.clock_part`)."""


Reply = Ready | Loaded | Prepared | CallDone | CallFailed | BatchDone


for _union in (JudgeAnswer, Order, Reply):
    configure_tagged_union(_union, get_converter(), tag_name="kind", tag_generator=tag)
