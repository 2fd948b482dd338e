"""Models closed to ``/v1`` while a benchmark or tuning job owns them.

The job manager opens a window when a job claims a model and closes it when the model is restored;
the router answers that model's ``/v1`` requests with 503 ``maintenance`` and a ``Retry-After``
from the job's estimate, and the health monitor neither probes nor unloads it meanwhile.
``Maintenance`` is the one owner of which windows are open; each of the three is handed it.
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
from dataclasses import dataclass, field

from daemon.api.jobs import JobKind
from daemon.errors import DaemonProblem

JOB_PASS_HEADER = "X-MirbadLLM-Job"  # a job's own /v1 requests (its overhead rounds) carry its window's token
_VERB = {"benchmark": "benchmarked", "tune": "tuned"}
_DOING = {"benchmark": "benchmarking", "tune": "tuning"}


@dataclass
class MaintenanceWindow:
    """A model closed to ``/v1`` while a job runs on it; ``until`` is a monotonic estimate."""

    job_id: str
    kind: JobKind
    model: str
    until: float
    pass_token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    def lets_through(self, token: str | None) -> bool:
        """A request carrying this window's token is the job's own: it passes the window (and needs
        no key); the token lives only while the job holds the model and is never shown."""
        return bool(token) and hmac.compare_digest(token or "", self.pass_token)

    def retry_after_s(self, now: float | None = None) -> int:
        left = self.until - (time.monotonic() if now is None else now)
        return max(1, math.ceil(left))

    @property
    def doing(self) -> str:
        """What holds the model, for every view: "tuning (job tune-m-...)"."""
        return f"{_DOING[self.kind]} (job {self.job_id})"

    def start_refusal(self) -> DaemonProblem:
        """The 409 a Start by the user gets while the job holds the model (the job restores it)."""
        return DaemonProblem(409, "model_busy", f"'{self.model}' is being {_VERB[self.kind]} (job {self.job_id}), "
                             f"which starts it again with its saved settings when it ends (in about "
                             f"{self.retry_after_s()} s); cancel the job to start it now.")

    def refusal(self) -> DaemonProblem:
        """The 503 ``maintenance`` a ``/v1`` request for the model gets, with the job's ``Retry-After``."""
        seconds = self.retry_after_s()
        return DaemonProblem(503, "maintenance", f"The model '{self.model}' is being {_VERB[self.kind]} "
                             f"(job {self.job_id}); try again in about {seconds} s.", retry_after=seconds)


class Maintenance:
    """The open windows, by model id."""

    def __init__(self) -> None:
        self._windows: dict[str, MaintenanceWindow] = {}

    def open(self, window: MaintenanceWindow) -> MaintenanceWindow:
        self._windows[window.model] = window
        return window

    def close(self, model_id: str) -> None:
        self._windows.pop(model_id, None)

    def get(self, model_id: str) -> MaintenanceWindow | None:
        return self._windows.get(model_id)

    def lets_through(self, token: str | None) -> bool:
        """Some open window's token: a job's own request (it needs no key; its model's window is
        checked again when the model is known)."""
        return any(w.lets_through(token) for w in self._windows.values())

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._windows

    def __len__(self) -> int:
        return len(self._windows)
