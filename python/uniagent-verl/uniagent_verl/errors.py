"""The package's errors: one base class, and the two kinds verl's trainer must tell apart."""

from __future__ import annotations

from typing import Any


class UniagentError(Exception):
    """Base class of every error this package raises on purpose."""


class UniagentInfrastructureError(UniagentError):
    """The rollout could not be run for a reason the policy had no part in.

    Raised for a 200 answer with ``status: "failure"`` (sandbox, reward or generation-bridge
    failure: ``rollout`` then holds the service's partial record), a connection dropped or timed
    out mid-rollout, a 5xx answer, or a service still busy (429) when the deadline passed.
    Raised from ``UniagentAgentLoop.run``, it is how verl's v1 (TransferQueue) agent-loop
    manager marks the sample's whole group ``failure``.
    """

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        rollout: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.rollout = rollout

    @property
    def exit_reason(self) -> str | None:
        """The service's ``exit_reason`` on a ``status: failure`` answer, else ``None``."""
        if self.rollout is None:
            return None
        reason = self.rollout.get("exit_reason")
        return reason if isinstance(reason, str) else None


class UniagentRequestError(UniagentError):
    """The service refused the request as malformed (422), or answered another 4xx.

    This is a configuration error (a bad dataset row, a task the environment refuses, a wrong
    URL), not a rollout failure: retrying the same request cannot help. ``field`` names the
    offending request field when the service said which.
    """

    def __init__(self, message: str, *, field: str | None = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.http_status = http_status


class UniagentConfigError(UniagentError):
    """This package's own configuration (agent-loop kwargs, env vars, dataset row) is unusable."""


class UniagentServiceStartError(UniagentInfrastructureError):
    """The rollout service could not be started or reached."""
