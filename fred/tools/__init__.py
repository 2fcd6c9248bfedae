"""Tools layer: what people do with runs, built on the layers below.

The ``fred`` command line, comparisons, sweeps, plots, traces, replay on an accelerator,
calibration of compute times, the compilation cache and the generated reference docs.
"""

from fred._lazy import submodule as _submodule


def __getattr__(name: str) -> object:  # a submodule, imported on first use
    return _submodule(globals(), name)
