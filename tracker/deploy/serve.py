"""``tracker serve``: a serving Triton (the nvidia-pytriton wheel's) for the deploy commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracker.lifecycle import until_signal


def serve_forever(repository: Path, *, grpc_port: int, http_port: int, metrics_port: int,
                  log_dir: Path | None, echo: Callable[[str], None]) -> None:
    """Run Triton in explicit model control mode over ``repository`` (created when missing)
    on 127.0.0.1 until SIGINT/SIGTERM or until the server exits."""
    from tracker.spec import ServerSection
    from tracker.triton.server.local import LocalTritonServer

    repository.mkdir(parents=True, exist_ok=True)
    server = LocalTritonServer(ServerSection.model_construct(
        grpc_port=grpc_port, http_port=http_port, metrics_port=metrics_port), log_dir=log_dir)
    with until_signal() as stop, server:
        server.start(repository, explicit=True)
        echo(f"Triton serving {repository} (explicit model control): grpc "
             f"{server.endpoints.grpc}, http {server.endpoints.http}; Ctrl-C stops\n"
             f"its log (for the deploy commands' error messages): "
             f"export TRACKER_TRITON_LOG={server.log_path}")
        while not stop.wait(1.0) and server.running:
            pass
