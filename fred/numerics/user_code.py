"""Models from the user's own code: the model kind of :mod:`fred.models.python`, whose
``factory: "pkg.module:make"`` names a function returning the model.

A factory returns what JAX users already write: a Flax linen or NNX module, an Equinox
module, or a pair of pure functions ``init(key) -> params`` and ``apply(params, x) -> logits``.
Each is adapted to fred's one model form, ``init``/``apply`` over a flat dict of float32
arrays named by their path in the user's pytree (``Dense_0.kernel``, ``layers.0.weight``),
so that the run, its records, checkpoints and tape treat it as any other model (:func:`build`),
checked on a few examples; :func:`sizes` tells its parameters and widest value from their
shapes alone.

Whatever the user's code raises, ``sys.exit`` included, is refused in one line naming the field
and the code (:data:`USER_ERRORS`); Ctrl-C still stops fred. Running a scenario that names a
factory runs that code: ``fred run --no-user-code`` refuses such scenarios.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fred.numerics import rng
from fred.numerics.models import Model, Params
from fred.scenario.schema import Scenario

Tree = Any
# What the user's code may raise that fred refuses in a line: sys.exit too (SystemExit), which
# would end fred with no word; KeyboardInterrupt is the user's stop, and stops fred.
USER_ERRORS = (Exception, SystemExit)
STYLES = "a Flax module (linen or NNX), an Equinox module, or a pair (init, apply) of functions"
# Given to a factory that asks for them by name, unless the scenario's args give them.
PROVIDED = ("key", "rngs", "feature_shape", "outputs")


class UserCodeError(ValueError):
    """The user's code cannot serve as a model or loss; the message names the field and the fix."""


def names_user_code(scenario: Scenario) -> list[str]:
    """The fields of ``scenario`` that name code to import and run (empty: it runs none)."""
    return scenario.model.code_fields()


# ----------------------------------------------------------------------------- importing
def import_object(path: str, field: str, code_dir: str) -> Any:
    """The object at ``'package.module:attribute'``; ``code_dir`` (the scenario's folder) is
    searched last, so a module next to the scenario imports wherever fred runs."""
    module_name, _, attribute = path.partition(":")
    try:
        module = _import(module_name, code_dir)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        raise UserCodeError(
            f"{field}: cannot import {module_name!r} ({err}); looked in the installed packages, PYTHONPATH "
            "and "
            f"{code_dir} (model.code_dir): put {top}.py there, set model.code_dir to the folder that holds "
            "it, or "
            "install its package"
        ) from None
    except USER_ERRORS as err:  # the user's module failed while importing: its error, named
        raise UserCodeError(
            f"{field}: importing {module_name!r} raised {type(err).__name__}: {err}"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            public = sorted(n for n in dir(found) if not n.startswith("_"))[:20]
            raise UserCodeError(
                f"{field}: {module_name!r} has no {attribute!r}; it has: "
                f"{', '.join(public) or 'nothing public'}"
            )
        found = getattr(found, part)
    return found


def _import(name: str, code_dir: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name.split(".")[0] or code_dir in sys.path:
            raise
        sys.path.append(code_dir)  # last: a file there never shadows an installed package
        return importlib.import_module(name)


# ----------------------------------------------------------------------------- styles
class Style(NamedTuple):
    """One kind of user model: ``params(obj, key)`` are its trained arrays (a pytree of
    them), ``apply(tree, x)`` its outputs for a batch; ``name`` for messages."""

    name: str
    params: Callable[[Any, jax.Array], Tree]
    apply: Callable[[Tree, jax.Array], jax.Array]


def detect(obj: Any, where: str, feature_shape: tuple[int, ...]) -> Style:
    """How to train what a factory returned, or an error naming what it is and what it may be."""
    modules = [c.__module__ for c in type(obj).__mro__]
    if any(m.startswith("flax.linen") for m in modules):
        return _linen(obj, where, feature_shape)
    if any(m.startswith("flax.nnx") for m in modules):
        return _nnx(obj, where)
    if any(m.startswith("equinox") for m in modules):
        return _equinox(obj)
    pair = _pair(obj)
    if pair is not None:
        init, apply = pair
        return Style("functions", lambda _obj, key: init(key), apply)
    raise UserCodeError(f"{where} returned {_what(obj)}; it must return {STYLES}")


def _pair(obj: Any) -> tuple[Callable, Callable] | None:
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and all(callable(f) for f in obj):
        return obj[0], obj[1]
    init, apply = getattr(obj, "init", None), getattr(obj, "apply", None)
    if callable(init) and callable(apply):
        return init, apply
    return None


def _what(obj: Any) -> str:
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of {len(obj)} ({', '.join(type(o).__name__ for o in obj[:4])})"
    return f"a {type(obj).__module__}.{type(obj).__qualname__}"


def _linen(module: Any, where: str, feature_shape: tuple[int, ...]) -> Style:
    dummy = jnp.zeros((1, *feature_shape), jnp.float32)

    def params(obj: Any, key: jax.Array) -> Tree:
        variables = obj.init(key, dummy)
        others = sorted(set(variables) - {"params"})
        if others:
            raise UserCodeError(
                f"{where}: the linen module keeps collections {others} besides 'params' (state such as "
                "BatchNorm's "
                "batch_stats, updated as it trains); fred trains parameters only: use LayerNorm or "
                "GroupNorm, "
                "or BatchNorm(use_running_average=True)"
            )
        return variables["params"]

    return Style("flax.linen", params, lambda tree, x: module.apply({"params": tree}, x))


def _nnx(module: Any, where: str) -> Style:
    from flax import nnx

    graphdef, _, rest = nnx.split(module, nnx.Param, ...)
    kept = sorted(
        {type(v).__name__ for v in jax.tree.leaves(rest, is_leaf=lambda v: isinstance(v, nnx.Variable))}
    )
    if kept:
        raise UserCodeError(
            f"{where}: the NNX module holds {', '.join(kept)} state besides its nnx.Param parameters "
            "(BatchNorm's "
            "statistics, Dropout's random keys); fred trains parameters only: use LayerNorm or GroupNorm, "
            "and leave "
            "Dropout out"
        )

    def params(obj: Any, _key: jax.Array) -> Tree:
        return nnx.split(obj, nnx.Param, ...)[1]

    return Style("flax.nnx", params, lambda tree, x: nnx.merge(graphdef, tree)(x))


def _equinox(module: Any) -> Style:
    import equinox as eqx

    static = eqx.partition(module, eqx.is_inexact_array)[1]

    def params(obj: Any, _key: jax.Array) -> Tree:
        return eqx.partition(obj, eqx.is_inexact_array)[0]

    # Equinox modules take one example, by its convention: the batch is mapped over them.
    return Style("equinox", params, lambda tree, x: jax.vmap(eqx.combine(tree, static))(x))


# ----------------------------------------------------------------------------- the factory
def call_factory(
    cfg: Any, factory: Callable, key: jax.Array, feature_shape: tuple[int, ...], outputs: int
) -> Any:
    """``factory(**cfg.args)``, with ``key``, ``rngs`` (an ``nnx.Rngs``), ``feature_shape`` and
    ``outputs`` added for a factory that names them and whose args do not give them."""
    kwargs = dict(cfg.args)
    try:
        wanted = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the args alone
        wanted = {}
    provided = {
        "key": lambda: key,
        "rngs": lambda: _rngs(cfg, key),
        "feature_shape": lambda: tuple(feature_shape),
        "outputs": lambda: outputs,
    }
    for name in PROVIDED:
        if name in wanted and name not in kwargs:
            kwargs[name] = provided[name]()
    try:
        return factory(**kwargs)
    except TypeError as err:
        if _rejected_arguments(err, factory):
            raise UserCodeError(
                f"model.args: {cfg.factory} rejected the arguments {sorted(kwargs)} ({err}); "
                f"it takes {_signature(factory)}"
            ) from None
        raise UserCodeError(f"model.factory: {cfg.factory} raised TypeError: {err}") from None
    except UserCodeError:
        raise
    except USER_ERRORS as err:
        raise UserCodeError(f"model.factory: {cfg.factory} raised {type(err).__name__}: {err}") from None


def _rngs(cfg: Any, key: jax.Array) -> Any:
    try:
        from flax import nnx
    except ImportError:
        raise UserCodeError(
            f"model.factory: {cfg.factory} takes rngs, an nnx.Rngs, but Flax is not installed: "
            "pip install flax, or name the argument key (a JAX key)"
        ) from None
    return nnx.Rngs(key)


def _rejected_arguments(err: TypeError, factory: Callable) -> bool:
    name = getattr(factory, "__name__", "")
    return "argument" in str(err) and (not name or name in str(err))


def _signature(factory: Callable) -> str:
    try:
        return f"{getattr(factory, '__name__', 'it')}{inspect.signature(factory)}"
    except (TypeError, ValueError):
        return "arguments this message cannot show"


def checked_factory(cfg: Any) -> Callable:
    """The factory ``cfg`` names, if it can be called."""
    factory = import_object(cfg.factory, "model.factory", cfg.code_dir)
    if not callable(factory):
        raise UserCodeError(
            f"model.factory: {cfg.factory} is {_what(factory)}, not a function; name a function "
            f"that returns {STYLES}"
        )
    return factory


# ----------------------------------------------------------------------------- flat parameters
def flat_names(tree: Tree, where: str) -> list[str]:
    """Each leaf's name (its path, dot-separated), in the tree's leaf order; float32 leaves only."""
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = ".".join(_key_name(key) for key in path).removesuffix(".value") or "params"
        if getattr(leaf, "dtype", None) != jnp.float32:
            raise UserCodeError(
                f"{where}: parameter {name!r} is {getattr(leaf, 'dtype', type(leaf).__name__)}; fred trains "
                "float32 "
                "arrays only: make it float32, or keep it out of the parameters (a constant in apply)"
            )
        names.append(name)
    if len(set(names)) != len(names):
        raise UserCodeError(
            f"{where}: two parameters share a name in {names[:10]}; give the pytree distinct keys"
        )
    if not names:
        raise UserCodeError(f"{where}: the model has no parameters (no float32 arrays) to train")
    return names


def _key_name(key: Any) -> str:
    """One step of a pytree path as text: a dict key, an attribute or an index."""
    for attribute in ("key", "name", "idx"):  # DictKey / FlattenedIndexKey, GetAttrKey, SequenceKey
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def loss_function(cfg: Any) -> Callable[[jax.Array, jax.Array], jax.Array] | None:
    """One example's loss from its outputs and label: a named one, or the user's; None for the
    data's own (cross-entropy for class labels, squared error for regression targets)."""
    if cfg.loss is None:
        return None
    if cfg.loss == "cross_entropy":
        return cross_entropy
    if cfg.loss == "mse":
        return mse
    loss = import_object(cfg.loss, "model.loss", cfg.code_dir)
    if not callable(loss):
        raise UserCodeError(
            f"model.loss: {cfg.loss} is {_what(loss)}, not a function; name a function "
            "loss(outputs, label) -> a number, for one example"
        )
    return loss


def cross_entropy(outputs: jax.Array, label: jax.Array) -> jax.Array:
    """``-log softmax(outputs)[label]``: fred's classification loss, by name."""
    if not jnp.issubdtype(label.dtype, jnp.integer):
        raise UserCodeError(
            "model.loss: cross_entropy needs class labels (integers); this data set's targets are "
            f"{label.dtype} (regression): use mse"
        )
    return -jax.nn.log_softmax(outputs)[label]


def mse(outputs: jax.Array, label: jax.Array) -> jax.Array:
    """Half the squared error: against the target (regression, one output), or against the
    one-hot label (classification, one output a class)."""
    if jnp.issubdtype(label.dtype, jnp.integer):
        return 0.5 * jnp.sum((outputs - jax.nn.one_hot(label, outputs.shape[0], dtype=outputs.dtype)) ** 2)
    return 0.5 * (outputs[0] - label) ** 2


def probe_rows(feature_shape: tuple[int, ...], rows: int = 4) -> np.ndarray:
    """A few fixed example inputs for the checks a model is put through when it is built."""
    return np.random.default_rng(0).standard_normal((rows, *feature_shape)).astype(np.float32)


def close(a: np.ndarray, b: np.ndarray) -> bool:
    """Within what a different batch size may change in float32 (and no more)."""
    scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1.0)
    return (
        bool(np.all(np.isfinite(a) == np.isfinite(b)))
        and float(np.nanmax(np.abs(a - b), initial=0.0)) <= 1e-4 * scale
    )


def per_example_width(
    apply: Callable[[Tree, jax.Array], jax.Array], params: Tree, feature_shape: tuple[int, ...]
) -> int:
    """The most floats one example adds to a value of ``apply``'s program: each value's size
    traced with a batch of 2, less its size with a batch of 1 (a value the size of a weight
    adds nothing). 0 when the two programs differ in form and it cannot tell."""
    sizes = []
    for rows in (1, 2):
        x = jax.ShapeDtypeStruct((rows, *feature_shape), jnp.float32)
        sizes.append(_value_sizes(jax.make_jaxpr(apply)(params, x).jaxpr))
    if len(sizes[0]) != len(sizes[1]):
        return 0
    return max([two - one for one, two in zip(*sizes)] + [math.prod(feature_shape)])


def _value_sizes(jaxpr: Any) -> list[int]:
    """The size of every value a program makes, inner programs (jit, vmap, custom rules) included."""
    sizes = []
    for eqn in jaxpr.eqns:
        sizes += [math.prod(getattr(var.aval, "shape", ())) for var in eqn.outvars]
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    sizes += _value_sizes(inner)
    return sizes


def count(shapes: Tree) -> int:
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))


# ----------------------------------------------------------------------------- the model
def build(cfg: Any, feature_shape: tuple[int, ...], outputs: int) -> Model:
    """The user's model (``cfg``: a ``python`` model section) over flat, named float32 parameters,
    checked on a few examples: its output shape, and whether an example's outputs are its own."""
    factory = checked_factory(cfg)
    where = f"model.factory: {cfg.factory}"
    make = lambda key: call_factory(cfg, factory, key, feature_shape, outputs)
    probe_key = rng.jax_key(0, "model", "probe")  # the parameters the checks run on: any fixed ones
    built = make(probe_key)
    style = detect(built, where, feature_shape)
    tree = _user_call(where, "building its parameters", lambda: style.params(built, probe_key))
    treedef, names = jax.tree.structure(tree), flat_names(tree, where)

    def init(key: jax.Array) -> Params:
        made = style.params(make(key), key)
        if jax.tree.structure(made) != treedef:
            raise UserCodeError(
                f"{where}: the parameters' structure changes with the random key; it must not"
            )
        return dict(zip(names, jax.tree.leaves(made)))

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return style.apply(jax.tree.unflatten(treedef, [params[name] for name in names]), x)

    params = dict(zip(names, jax.tree.leaves(tree)))
    issue = _check_outputs(where, style.name, apply, params, feature_shape, outputs)
    return Model(init, apply, _width(cfg, apply, params, feature_shape, outputs), loss_function(cfg), issue)


def _width(cfg: Any, apply: Callable, params: Params, feature_shape: tuple[int, ...], outputs: int) -> int:
    """The most floats one example holds in the model (bounds evaluation's chunks): the probe's
    (:meth:`fred.models.python.PythonModel.probe`, traced once a process and shared with the
    pre-flight checks), or, where the probe could not tell, traced here on the built parameters."""
    try:
        probed = cfg.probe(feature_shape, outputs).width if hasattr(cfg, "probe") else 0
    except USER_ERRORS:  # a model that cannot be built by its shapes alone: traced on its parameters
        probed = 0
    return probed or per_example_width(apply, params, feature_shape)


def _user_call(where: str, doing: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except UserCodeError:
        raise
    except USER_ERRORS as err:
        raise UserCodeError(f"{where}: {doing} raised {type(err).__name__}: {str(err)[:300]}") from None


def _check_outputs(
    where: str, style: str, apply: Callable, params: Params, feature_shape: tuple[int, ...], outputs: int
) -> str:
    """Refuse a model whose outputs do not fit the data; return why per-example gradients
    would not be its gradients ("" when they are)."""
    rows = probe_rows(feature_shape)
    batch = _user_call(
        where,
        f"its {style} apply on {len(rows)} examples of shape {feature_shape}",
        lambda: np.asarray(jax.jit(apply)(params, rows)),
    )
    wanted = (len(rows), outputs)
    if batch.shape != wanted:
        need = (
            f"one output per class ({outputs} classes)"
            if outputs > 1
            else "one output (the regression target)"
        )
        raise UserCodeError(
            f"{where}: the model gives outputs of shape {batch.shape} for {len(rows)} examples; this data "
            "set needs "
            f"{wanted}: {need} for each example (a factory that takes 'outputs' is given the number)"
        )
    alone = np.concatenate([np.asarray(jax.jit(apply)(params, rows[i : i + 1])) for i in range(len(rows))])
    if not close(batch, alone):
        return (
            f"{where}: an example's outputs depend on the other examples in its batch (statistics over the "
            "batch?), so the exact reduction's per-example gradients are not this model's gradients; set "
            "strategy.reduction: fast, or make each example's outputs its own"
        )
    one = lambda p, x: jnp.sum(apply(p, x[None]))
    try:
        jax.eval_shape(jax.vmap(jax.grad(one), in_axes=(None, 0)), params, rows)
    except USER_ERRORS as err:
        return (
            f"{where}: the exact reduction maps jax.grad over single examples (jax.vmap), which this model "
            "does "
            f"not support ({type(err).__name__}: {str(err)[:200]}); set strategy.reduction: fast"
        )
    return ""


def sizes(cfg: Any, feature_shape: tuple[int, ...], outputs: int) -> tuple[int, int]:
    """The user's model's parameters, and the most floats one example holds in it (0: not
    known), from their shapes alone (``jax.eval_shape``): nothing is allocated."""
    factory = checked_factory(cfg)
    where = f"model.factory: {cfg.factory}"
    styles: list[Style] = []

    def params(key: jax.Array) -> Any:
        built = call_factory(cfg, factory, key, feature_shape, outputs)
        styles.append(detect(built, where, feature_shape))
        return styles[-1].params(built, key)

    shapes = _user_call(
        where, "building its parameters", lambda: jax.eval_shape(params, jax.random.PRNGKey(0))
    )
    try:
        width = per_example_width(styles[-1].apply, shapes, feature_shape)
    except USER_ERRORS:  # built under a trace, some models cannot be traced again; building them says why
        width = 0
    return count(shapes), width
