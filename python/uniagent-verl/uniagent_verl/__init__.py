"""uniagent as verl's agent loop.

- :mod:`uniagent_verl.agent_loop`: ``UniagentAgentLoop``, registered with verl as ``"uniagent"``.
- :mod:`uniagent_verl.bridge`: the generation bridge (the service's way to verl's ``server_manager``).
- :mod:`uniagent_verl.client`: the rollout service's HTTP client and its error mapping.
- :mod:`uniagent_verl.service`: start-or-connect to ``uniagent serve``.
- :mod:`uniagent_verl.dataset`: verl RL dataset Parquet from uniagent tasks.

This module imports none of them, so that the light parts work without verl installed; import
:mod:`uniagent_verl.agent_loop` (or ``import verl``, whose plugin entry point does it) to
register the agent loop.
"""

from .errors import (
    UniagentConfigError,
    UniagentError,
    UniagentInfrastructureError,
    UniagentRequestError,
    UniagentServiceStartError,
)

__all__ = [
    "UniagentConfigError",
    "UniagentError",
    "UniagentInfrastructureError",
    "UniagentRequestError",
    "UniagentServiceStartError",
]
__version__ = "0.1.0"
