"""The model kinds: one module a kind, each holding the kind's ``model`` section and all that
fred knows of it (see :mod:`fred.scenario.schema.model`, which finds these modules by name).

A kind's module defines one :class:`~fred.scenario.schema.model.ModelSection` subclass whose
``kind`` is a one-value ``Literal``: its configuration, how its model is built (the numerics
it builds with are imported when it is built, so that reading a scenario loads no JAX), its
layers, parameters and activation sizes, and the constants its memory estimate is fitted with.
Adding a model kind is adding a module here. Modules whose names begin with ``_`` are helpers.
"""

import fred.scenario.schema  # noqa: F401 - the schema first: it imports every kind, this package's modules included
