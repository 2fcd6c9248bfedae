"""The ``model`` section: the base every model kind's section subclasses, and the kinds, found by name.

Each model kind is one module of the package :data:`KINDS_PACKAGE` (``fred/models/``): its
section (a :class:`ModelSection` subclass whose ``kind`` is a one-value ``Literal``) holds the
kind's configuration and answers what the rest of fred asks of a model: how to build it, its
layers (for gradient buckets, FLOPs and per-layer transfers), its parameter count, and the
numbers the memory estimate needs. Generic code calls these methods and never branches on a
kind's name, so adding a kind is adding one module.

The kinds' package sits above the numerics it builds models with, so the scenario layer
never imports it: the modules are found by name when this module is first imported (a
plug-in discovery, as :mod:`fred.scenario.registry` finds the strategies), and
:data:`ModelConfig` is the discriminated union of their sections. The kinds' package imports
the schema before any of its modules (``fred/models/__init__.py``), so whichever is imported
first, every kind is in the union.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import Field

from fred.scenario import model_workloads
from fred.scenario.schema.base import Section

if TYPE_CHECKING:
    from fred.scenario.workloads import Layer

KINDS_PACKAGE = "fred.models"  # one module a model kind, each defining one ModelSection subclass
MAX_LAYERS = 100  # compile time and memory grow with depth: 2,000 layers compiled for 20 minutes, to 24 GB
Inputs = Literal["arrays", "images", "sequences"]


def _few_layers(layers: list[int]) -> list[int]:
    if len(layers) > MAX_LAYERS:
        raise ValueError(
            f"got {len(layers):,} layers; at most {MAX_LAYERS}: JAX compiles every layer of every "
            "gradient program, and its time and memory grow with depth (2,000 layers: 20 minutes, 24 GB)"
        )
    return layers


class ModelSection(Section):
    """Base of every model kind's section: its configuration, and what fred asks of the model.

    ``feature_shape`` is one example's input shape, ``outputs`` the model's outputs (classes,
    1 for a regression target, the vocabulary of token sequences)."""

    kind: str
    listed: ClassVar[int] = 100  # where the kind stands in lists of kinds (error messages, the schema)
    default: ClassVar[bool] = False  # the kind a scenario without a model section trains
    inputs: ClassVar[Inputs] = "arrays"  # arrays: vectors or images; images: (H, W, C); sequences: tokens
    layers_known: ClassVar[bool] = True  # whether fred knows its layers without running user code

    def build(self, feature_shape: tuple[int, ...], outputs: int) -> Any:
        """The model, a :class:`fred.numerics.models.Model`; a ``ValueError`` naming the fix for
        data of a shape it does not take."""
        raise NotImplementedError(f"model kind {self.kind!r} does not say how to build it")

    def layer_list(self, feature_shape: tuple[int, ...], outputs: int) -> list[Layer] | None:
        """Its layers in forward order, named as its parameters' keys begin, counted as
        :mod:`fred.scenario.model_workloads` counts; None where they are not known (user code,
        or a shape it does not take)."""
        return None

    def takes(self, feature_shape: tuple[int, ...]) -> bool:
        """Whether it builds for examples of ``feature_shape`` (False: building it says why not)."""
        return True

    def param_count(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """Its parameters, from its layers (0 where they are not known)."""
        own = model_workloads.model_workload(self, feature_shape, outputs)
        return 0 if own is None else own.param_count

    def activation_width(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """The most floats one example's forward pass holds in a layer: what evaluation's memory
        grows with (0: not known)."""
        return 0

    def stored_floats(self, feature_shape: tuple[int, ...], outputs: int) -> int:
        """Floats one example's training step holds for the backward pass, for the models whose
        activations outweigh their parameters; 0 for the others."""
        return 0

    def program_layers(self) -> int:
        """Layers the memory estimate counts in its gradient program (0: not known)."""
        return 1

    def hidden_units(self) -> list[int]:
        """The widths of its hidden dense layers in a row, whose runs of one unit the compile
        estimate counts (empty for a model without such a stack)."""
        return []

    def tile_equations(self) -> int:
        """Jaxpr equations of one tile's gradient, counted for JAX 0.10 (0: not known)."""
        return 0

    def check_data(self, data: Any) -> None:
        """Refuse data (the ``data`` section) this model cannot take, as far as the scenario tells;
        a ``ValueError`` naming the field and the fix."""
        source = data.source
        if self.inputs == "images" and source.kind == "synthetic":
            raise ValueError(
                f"model.kind {self.kind} needs images (H, W, C); data.source.kind synthetic gives "
                "flat feature vectors: use synthetic_images, cifar10, cifar100, digits or mnist"
            )

    def code_fields(self) -> list[str]:
        """The fields that name the user's code to import and run (empty: it runs none)."""
        return []


def _discover() -> list[type[ModelSection]]:
    """Every kind's section, imported by name from :data:`KINDS_PACKAGE`, in listing order."""
    package = importlib.import_module(KINDS_PACKAGE)
    found: dict[str, type[ModelSection]] = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        if module_info.name.startswith("_"):
            continue  # a helper of the kinds
        module = importlib.import_module(f"{KINDS_PACKAGE}.{module_info.name}")
        sections = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, ModelSection) and v.__module__ == module.__name__
        ]
        if len(sections) != 1:
            raise TypeError(
                f"{module.__name__} defines {len(sections)} ModelSection subclasses; a model "
                "kind's module defines one"
            )
        kind = sections[0].model_fields["kind"].default
        if kind in found:
            raise TypeError(
                f"model kind {kind!r} is defined twice, by {found[kind].__module__} and {module.__name__}"
            )
        found[kind] = sections[0]
    return sorted(found.values(), key=lambda section: section.listed)


KINDS: tuple[type[ModelSection], ...] = tuple(_discover())
ModelConfig = Annotated[Union[KINDS], Field(discriminator="kind")]  # type: ignore[valid-type]


def default_model() -> ModelSection:
    """The model of a scenario without a model section."""
    return next(section for section in KINDS if section.default)()


def kinds_taking(inputs: Inputs) -> list[str]:
    """The kinds whose models take ``inputs``, in listing order."""
    return [section.model_fields["kind"].default for section in KINDS if section.inputs == inputs]
