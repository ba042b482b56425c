"""``tracker status``: what Triton serves and what the registry says, side by side.

For each registered model: the Triton version that is READY under its deployment name (and
for every other model its deployment serves: composing models, other entries), the
versions the stage and the alias name, the version tagged ``tracker.deploy.status=serving``,
and whether they all agree; then one row per registered version (stage, aliases, deploy
status, when). ``tracker watch`` prints the same first line at start and after each action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import mlflow
from mlflow.exceptions import MlflowException

from tracker import tags
from tracker.deploy.pointers import Pointers, current, number
from tracker.deploy.publish import Publisher
from tracker.deploy.settings import TargetSettings, resolve_settings
from tracker.deploy.switch import MODELS
from tracker.deploy.transport import make_client
from tracker.errors import DeployError, TrackerError
from tracker.tracking import flavor, registry

MAX_ROWS = 10  #: versions listed per model by ``tracker status`` (newest first)


@dataclass(frozen=True)
class VersionRow:
    version: int
    stage: str
    aliases: tuple[str, ...]
    deploy_status: str
    deployed_at: str


@dataclass(frozen=True)
class ModelStatus:
    """One registered model: Triton's side and the registry's."""

    registered: str
    deployment: str
    pointers: Pointers
    stage_version: int | None
    alias_version: int | None
    tagged_serving: int | None  #: the version tagged tracker.deploy.status=serving
    triton_version: int | None  #: the READY Triton version (None: nothing READY)
    triton: str  #: "serves v2", "not deployed", "UNAVAILABLE (...)", "not asked (...)"
    uses_stages: bool  #: some version has a stage (a registry without stages has none)
    versions: tuple[VersionRow, ...] = ()

    @property
    def agrees(self) -> bool:
        """Triton serves the version that the alias, the stage (where the registry has
        stages) and the deploy status tag all name."""
        named = {self.alias_version, self.tagged_serving}
        if self.uses_stages:
            named.add(self.stage_version)
        return self.triton_version is not None and named == {self.triton_version}

    def line(self) -> str:
        def v(n: int | None) -> str:
            return "none" if n is None else f"v{n}"

        verdict = "agree" if self.agrees else "DISAGREE"
        if self.triton_version is None and not self.triton.startswith(("not deployed",
                                                                       "UNAVAILABLE")):
            verdict = "Triton not checked"
        return (f"{self.registered}: Triton {self.deployment!r} {self.triton}; registry: "
                f"stage {self.pointers.stage} {v(self.stage_version)}, alias "
                f"{self.pointers.alias!r} {v(self.alias_version)}, "
                f"{tags.DEPLOY_STATUS}=serving {v(self.tagged_serving)} ({verdict})")


def _triton(settings: TargetSettings | None, name: str, why_not: str) -> tuple[int | None, str]:
    if settings is None:
        return None, f"not asked ({why_not})" if why_not else "not asked"
    try:
        with make_client(settings) as client:
            publisher = Publisher(settings.repository, client)
            state = publisher.state(name)
            listed = [str(m) for m in state.meta.get(MODELS) or []] if state else []
            others = {m: publisher.state(m) for m in listed if m != name}
    except (TrackerError, OSError) as exc:
        return None, f"not reachable at {settings.endpoint} ({exc})"
    if state is None:
        return None, "not deployed"
    if state.version is None:
        return None, f"UNAVAILABLE ({state.reason or 'no version is READY'})"
    behind = [m for m, s in others.items() if s is None or s.version != state.version]
    if behind:
        return None, (f"UNAVAILABLE (serves v{state.version}, but its model(s) "
                      f"{', '.join(behind)} do not)")
    return state.version, f"serves v{state.version}"


def model_status(client: mlflow.MlflowClient, settings: TargetSettings | None, registered: str,
                 pointers: Pointers, *, why_not: str = "") -> ModelStatus:
    """The status of one registered model (``settings`` None: Triton is not asked, because
    ``why_not``)."""
    try:
        model = client.get_registered_model(registered)
    except MlflowException as exc:
        raise DeployError(f"cannot read registered model {registered!r}: {exc.message}") from exc
    name = flavor.validate_model_name(model.tags.get(tags.DEPLOY_NAME) or registered)
    in_stage, aliased = current(client, registered, pointers)
    versions = registry.all_versions(client, registered)
    serving = registry.serving_version(client, registered)
    aliases: dict[int, list[str]] = {}
    for alias, version in (model.aliases or {}).items():
        aliases.setdefault(int(version), []).append(alias)
    rows = tuple(VersionRow(int(v.version), v.current_stage or "None",
                            tuple(sorted(aliases.get(int(v.version), []))),
                            registry.deploy_status(v) or "-",
                            v.tags.get(tags.DEPLOY_AT, "-"))
                 for v in reversed(versions))
    triton_version, triton = _triton(settings, name, why_not)
    return ModelStatus(registered, name, pointers, number(in_stage), number(aliased),
                       number(serving), triton_version, triton,
                       any(v.current_stage not in (None, "", "None") for v in versions), rows)


def report(settings: TargetSettings | None, *, models: Sequence[str] = (),
           pointers: Pointers | None = None, why_not: str = "") -> tuple[str, bool]:
    """(the text ``tracker status`` prints, whether every model agrees)."""
    pointers = pointers or Pointers()
    client = mlflow.MlflowClient()
    names = list(models) or registry.triton_models(client)
    if not names:
        return (f"no registered model is tagged {tags.MODEL_FLAVOR}=triton "
                "(tracker promote tags the models it registers; or name one with --model)", True)
    lines: list[str] = []
    ok = True
    for registered in names:
        found = model_status(client, settings, registered, pointers, why_not=why_not)
        ok = ok and found.agrees
        lines.append(found.line())
        lines.append(f"  {'version':>7}  {'stage':<10}  {'aliases':<16}  {'deploy status':<13}"
                     "  deployed at")
        for row in found.versions[:MAX_ROWS]:
            lines.append(f"  {row.version:>7}  {row.stage:<10}  "
                         f"{','.join(row.aliases) or '-':<16}  {row.deploy_status:<13}"
                         f"  {row.deployed_at}")
        if len(found.versions) > MAX_ROWS:
            lines.append(f"  ... and {len(found.versions) - MAX_ROWS} older version(s)")
    return "\n".join(lines), ok


def report_for(options: Mapping[str, str | None], *, models: Sequence[str] = (),
               stage: str = registry.PRODUCTION, alias: str = registry.PRODUCTION_ALIAS) -> str:
    """``tracker status``: :func:`report` with the target settings from the command's options
    (an empty option is not given). Without usable settings (no repository set) the
    registry's side is shown and Triton's says why it was not asked."""
    pointers = Pointers(stage, alias)
    try:
        settings: TargetSettings | None = resolve_settings(
            "triton", {k: v for k, v in options.items() if v})
        why_not = ""
    except DeployError as exc:
        settings, why_not = None, str(exc)
    return report(settings, models=models, pointers=pointers, why_not=why_not)[0]
