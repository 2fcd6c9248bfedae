"""fred: a deterministic single-node simulator of distributed deep-learning training.

Quick use::

    import fred
    result = fred.run("scenarios/quickstart.yaml", out="runs/quickstart-50", stop={"max_updates": 50})
    result.metrics            # eval loss/accuracy against simulated time
    again = fred.load_run(result.path)  # result.path is None when run without out=
"""

__version__ = "0.1.0"

from fred.api import load_run, run  # noqa: E402
from fred.loading import ScenarioError, load_scenario, validate  # noqa: E402
from fred.runner import RunResult  # noqa: E402
from fred.scenario import Scenario  # noqa: E402

__all__ = ["RunResult", "Scenario", "ScenarioError", "load_run", "load_scenario", "run", "validate", "__version__"]
