"""The downloaded model is the one that was registered: its sha256 against the version's tag.

When a model is logged (:func:`tracker.tracking.flavor.log_repository`) the digest of its files as a
deployment reads them becomes the logged model's tag ``tracker.artifact_sha256``, and
registering it (:func:`tracker.tracking.registry.register_version`) copies the tag onto the
version. Before a registry version is deployed, :func:`check_download` computes the same digest
on what was downloaded: a model whose files changed in the artifact store after registration is
refused, naming both digests. A version without the tag (registered by hand, or by an older
release) is deployed without the check.
"""

from __future__ import annotations

from mlflow import MlflowClient

from tracker import tags
from tracker.deploy.steps import source_digest
from tracker.errors import DeployError
from tracker.tracking import registry
from tracker.tracking.flavor import TritonRepositoryDir, artifact_digest


def digest(source: TritonRepositoryDir) -> str:
    """The sha256 of every model of ``source`` as deployed: in load order, each model's
    :func:`~tracker.deploy.steps.source_digest` (config text and the latest version folder's
    files), with its name when there are several."""
    return artifact_digest(source.models, source_digest)


def check_download(client: MlflowClient, registered: str, version: int,
                   source: TritonRepositoryDir) -> None:
    """Raise :class:`DeployError` when the downloaded ``source`` of version ``version`` of
    ``registered`` differs from the digest the version's tag ``tracker.artifact_sha256``
    recorded at registration; a version without the tag passes unchecked."""
    mv = registry.get_version(client, registered, version)  # DeployError with MLflow's message
    want = (mv.tags or {}).get(tags.ARTIFACT_SHA256)
    if not want:
        return
    got = digest(source)
    if got != want:
        raise DeployError(f"the downloaded model of {registered} version {version} has sha256 "
                          f"{got}, but the registry recorded {want} when it was registered: "
                          "the artifact changed after registration; nothing deployed")
