"""fred's version and the strategy contract's, in a module of their own so that the run records
and the scenario layer can name them without importing the package's API.

``__version__`` follows semantic versioning (CHANGELOG.md says what each release changed for
scenario files and plug-ins). ``strategy_api`` is the version of the strategy contract
(docs/strategy-contract.md), ``"MAJOR.MINOR"``: a minor version adds to the contract and keeps
what plug-ins of the versions before it wrote working (a deprecated part for one minor version
of fred, with a ``DeprecationWarning``); a major version may drop what is deprecated. A plug-in
states the version it targets as its config's ``strategy_api`` class attribute.
"""

__version__ = "0.2.0"
strategy_api = "1.1"  # 1.0: fred 0.1 (no gradient_steps); 1.1: fred 0.2 (gradient_steps, strategy_api)
