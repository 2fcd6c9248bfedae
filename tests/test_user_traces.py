"""How often fred traces a bring-your-own model: the widest value one example holds is traced once
a process (``PythonModel.probe``), by the pre-flight checks and the build alike, and is what
tracing the built model's own parameters tells."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from fred.models.python import _PROBES, PythonModel
from fred.numerics import user_code

MODULE = "fred_test_user_traces"
SOURCE = textwrap.dedent("""
    import jax
    import jax.numpy as jnp

    APPLIED = [0]  # Python runs of apply: one a trace (or an eager call)


    def functions(outputs, hidden=6):
        def init(key):
            k1, k2 = jax.random.split(key)
            w1 = jax.random.normal(k1, (64, hidden)) * 0.1
            return {"w1": w1, "w2": jax.random.normal(k2, (hidden, outputs))}

        def apply(params, x):
            APPLIED[0] += 1
            h = jnp.tanh(x.reshape(x.shape[0], -1) @ params["w1"])
            return h @ params["w2"]

        return init, apply
""")
SHAPE, OUTPUTS = (8, 8, 1), 10


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    folder: Path = tmp_path_factory.mktemp("user_traces")
    (folder / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(folder))
    import importlib

    yield importlib.import_module(MODULE)
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def test_the_build_takes_the_probes_width_and_traces_no_more_for_it(module):
    _PROBES.clear()
    cfg = PythonModel(factory=f"{MODULE}:functions", args={"hidden": 7})
    probe = cfg.probe(SHAPE, OUTPUTS)
    before = module.APPLIED[0]
    model = user_code.build(cfg, SHAPE, OUTPUTS)
    traced_in_build = module.APPLIED[0] - before
    params = model.init(user_code.rng.jax_key(0, "model", "probe"))
    assert model.width == probe.width == user_code.per_example_width(model.apply, params, SHAPE) > 0
    # the checks' programs (4 rows, 1 row, the per-example gradient), not the width's two traces again
    assert traced_in_build == 3


def test_a_probe_that_cannot_tell_leaves_the_width_to_the_built_parameters(module, monkeypatch):
    cfg = PythonModel(factory=f"{MODULE}:functions", args={"hidden": 5})
    monkeypatch.setattr(PythonModel, "probe", lambda *_: (_ for _ in ()).throw(ValueError("no shapes")))
    model = user_code.build(cfg, SHAPE, OUTPUTS)
    params = model.init(user_code.rng.jax_key(0, "model", "probe"))
    assert model.width == user_code.per_example_width(model.apply, params, SHAPE) > 0
