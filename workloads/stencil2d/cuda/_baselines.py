"""What users compare a stencil kernel against: cuDNN two ways and ATen's FFT, rendered by the template."""

from __future__ import annotations

from hiera_core.records import Baseline, Task
from hiera_workloads.stencil2d.cuda._template import CudaStencilTemplate

BASELINES = (
    ("cuDNN via torch conv2d", "libraries_pytorch", {"aten": "conv2d"}),
    ("cuDNN direct (fastest of cudnnFind)", "cuda_libraries", {"cudnn": True}),
    ("FFT (ATen rfft2 · irfft2)", "libraries_pytorch", {"aten": "fft"}),
)
"""(name, space, template knobs) of what users compare a stencil kernel against."""


def baselines(task: Task) -> list[Baseline]:
    template = CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])
    out = []
    for name, space, knobs in BASELINES:
        params = {**template.defaults(), **knobs}
        out.append(Baseline(name=name, space=space, source=template.render(params), origin=template.describe(params)))
    return out
