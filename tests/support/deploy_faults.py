"""A deployment run as its own process, stopped by a fault at a chosen step: the process sends
itself SIGTERM, SIGINT or SIGKILL when the step begins, as ``kill`` from a terminal, a
container runtime or the OOM killer would, or the registry fails from that step on.

    python -m tests.support.deploy_faults STEP FAULT NAME MODEL_URI

The settings come from the environment (``TRACKER_TRITON_URL``/``_REPOSITORY``/``_LOG``,
``MLFLOW_TRACKING_URI``); the exit status is the deployment's (0, 1 for a DeployError, 128 +
the signal's number for a signal). The steps are the functions each phase of a deployment
calls first (tracker/deploy/switch.py's module docstring).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

STEPS: dict[str, tuple[str, str]] = {
    # step: (module, function) wrapped so the fault comes when it is first called
    "shadow-load": ("tracker.deploy.shadow", "load_with_fallback"),
    "check": ("tracker.deploy.steps", "check_inference"),
    "switch-load": ("tracker.deploy.switch", "load_with_fallback"),
    "drop-old": ("tracker.deploy.switch", "_drop_old"),
    "finish": ("tracker.deploy.switch", "finish"),
    "registry": ("tracker.deploy.registry_sync", "_apply_once"),
}
FAULTS = ("none", "SIGTERM", "SIGINT", "SIGKILL", "registry-down")


def _inject(step: str, fault: str) -> None:
    import importlib

    module_name, attr = STEPS[step]
    module = importlib.import_module(module_name)
    real: Callable[..., Any] = getattr(module, attr)
    fired = {"n": 0}

    def faulty(*args: Any, **kwargs: Any) -> Any:
        fired["n"] += 1
        if fault == "registry-down":
            from mlflow.exceptions import MlflowException

            raise MlflowException("the registry is unreachable (injected)")
        if fired["n"] == 1 and fault != "none":
            os.kill(os.getpid(), getattr(signal, fault))
        return real(*args, **kwargs)

    setattr(module, attr, faulty)


def main(argv: list[str]) -> int:
    step, fault, name, model_uri = argv
    if step not in STEPS or fault not in FAULTS:
        print(f"usage: STEP in {list(STEPS)}, FAULT in {list(FAULTS)}", file=sys.stderr)
        return 2
    from tracker.deploy import registry_sync, service
    from tracker.deploy.pointers import Pointers
    from tracker.deploy.settings import resolve_settings
    from tracker.errors import DeployError
    from tracker.lifecycle import Interrupted

    registry_sync.WAIT_S = 0.1
    _inject(step, fault)
    try:
        found = service.deploy(resolve_settings(), name, model_uri, pointers=Pointers(),
                               log=lambda line: print(line, flush=True))
    except DeployError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    except Interrupted as exc:
        print(f"interrupted: {exc}", flush=True)
        return exc.exit_code
    print(f"deployed: {found.get('version')} pending={found.get('registry_pending')}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
