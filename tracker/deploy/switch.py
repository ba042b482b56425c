"""Publish a configuration (one model, a pipeline, several entry models with their composing
models) into a Triton model repository: every model switched to the new version, or every
model as it was. One model is the configuration of one model, its only entry: the same
steps, run once. The caller holds the repository lock (:meth:`Publisher.locked`) for the
whole deployment.

The first entry serves under the deployment name; every other model (composing models, the
other entries) under its own name (an entry's config calls its steps by name). Publishing
version N:

1. the journal (:mod:`tracker.deploy.journal`) is written: from here on, an exception, a
   signal or a ``kill -9`` ends in every model as it was;
2. the check, where no client reaches it (:mod:`tracker.deploy.shadow`): every model is loaded
   under its shadow name and must be READY, each entry answers one request (when its
   inputs are numbers; streamed to a decoupled model, a whole sequence to a stateful one)
   and the first entry the study's output check; the shadows are then removed. Until
   here the serving repository folders are untouched;
3. the switch, in load order (composing models first, the entries last): each model's
   version folder is put in place (a version folder is complete or absent; a folder of the
   same number is kept aside until the end), its config.pbtxt lists the versions it serves
   and N, and it is loaded: N, already checked, loads beside the serving version; then, in
   reverse load order, config.pbtxt lists only N and is loaded again, dropping the old
   versions (requests without a version go to the newest READY one, so clients see the old
   version, then N, and no failed request);
4. the commit: the journal's phase becomes ``committed``; the old version folders are
   removed and every model's record written (repeatable, so a crash here is finished by the
   next deployment);
5. any failure before the commit: in reverse load order every model gets its previous
   config.pbtxt and folders back and is loaded again (a model that served keeps serving, one
   that did not exist is unloaded and removed); :class:`DeployError` names the model, the step
   and Triton's message, and a signal is raised again once the rollback is done.

The deployment's record (``deployment.json`` of the first entry) lists every model
(``models``, load order) and the entries; every other model's says ``part_of:
<deployment>``: a model another deployment owns (or a folder no deployment wrote) is never
taken over. Models the previous version had and this one has not are unloaded and removed
after the switch.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker import lifecycle
from tracker.deploy import shadow, steps
from tracker.deploy.journal import COMMITTED, SWITCHING, Journal
from tracker.deploy.plan import Model, load_with_fallback, plan, stage_into, write_config
from tracker.deploy.publish import META_FILE, DeploymentState, Publisher, PublishResult
from tracker.errors import DeployError, ServerError
from tracker.tracking.flavor import CONFIG_FILE, validate_model_name

if TYPE_CHECKING:
    from tracker.tracking.flavor import TritonRepositoryDir

PART_OF = "part_of"   #: deployment.json of a model served for another: the deployment
MODELS = "models"     #: deployment.json of the first entry: every model, load order
ENTRIES = "entries"   #: deployment.json of the first entry: the entries (served names)


def served_names(source: TritonRepositoryDir, name: str) -> list[str]:
    """The name each model serves as, in load order: the first entry as ``name``."""
    first = source.entries[0]
    return [name if m.name == first else m.name for m in source.models]


def digest(source: TritonRepositoryDir, name: str) -> str:
    """What makes two deployments the same: every model's name, files and config."""
    h = hashlib.sha256(name.encode())
    for served, model in zip(served_names(source, name), source.models, strict=True):
        h.update(f"\0{served}\0{steps.source_digest(model)}".encode())
    return h.hexdigest()[:16]


def _refuse_foreign(name: str, names: list[str],
                    states: Mapping[str, DeploymentState | None]) -> None:
    holder = states[name]
    if holder is not None and holder.meta.get(PART_OF):
        raise DeployError(f"{name!r} is a model of deployment {holder.meta[PART_OF]!r}; "
                          "deploy under another name")
    for other in (n for n in names if n != name):
        state = states[other]
        if state is None or state.meta.get(PART_OF) == name:
            continue
        owner = state.meta.get(PART_OF)
        what = (f"a model of deployment {owner!r}" if owner
                else "a deployment of its own" if state.meta
                else "a model this target did not deploy")
        raise DeployError(f"model {other!r} of deployment {name!r} is already in the "
                          f"repository as {what}; a model belongs to one deployment, so it is "
                          "not taken over (remove it first)")


def publish(pub: Publisher, name: str, version: int, source: TritonRepositoryDir, *,
            meta: Mapping[str, Any] | None = None, check: shadow.Check | None = None,
            registry: Mapping[str, Any] | None = None,
            after_commit: Callable[[PublishResult], None] | None = None) -> PublishResult:
    """Serve ``source`` as version ``version`` of every model, the first entry as ``name``
    (the module docstring). ``registry``: the registry update still to make once it serves,
    kept in the journal until it is made (None: none); ``after_commit`` runs once every model
    serves, with signals held until it returns (the registry update goes there). Raises
    :class:`DeployError` (with the server's message) after rolling every model back; a
    signal (:class:`~tracker.lifecycle.Interrupted`) is raised again after the rollback."""
    validate_model_name(name)
    if not isinstance(version, int) or version < 1:
        raise DeployError(f"a Triton version must be a positive integer, but got {version!r}")
    names = served_names(source, name)
    if names.count(name) > 1:
        raise DeployError(f"deployment name {name!r} is also the name of another model of "
                          f"the configuration {list(source.names)}")
    start = time.monotonic()
    states = {n: pub.state(n) for n in names}
    _refuse_foreign(name, names, states)
    before = states[name]
    sha = digest(source, name)
    if (before is not None and before.meta.get("source_digest") == sha
            and all(s is not None and s.ready_versions == (version,)
                    for s in states.values())):
        pub.log(f"{name}: version {version} already serves ({', '.join(names)}); "
                "nothing to do")
        production = steps.production_of(source.entry, name)
        return PublishResult(name, version, (), str(before.meta.get("serving", "")),
                             production, production, 0.0)
    entries = {name if e == source.entries[0] else e for e in source.entries}
    models = [plan(pub, n, src, version, states[n], entry=n in entries)
              for n, src in zip(names, source.models, strict=True)]
    journal = Journal(name, version, SWITCHING, [m.undo for m in models],
                      registry=dict(registry) if registry is not None else None)
    journal.save(pub.repository)
    _switch(pub, name, version, models, before, check, journal)
    with lifecycle.held():  # past the commit point a signal waits for the end
        journal.records = _records(name, version, models, sha, meta)
        journal.phase = COMMITTED
        journal.save(pub.repository)
        finish(pub, journal)
        _remove_left_behind(pub, name, before, names)
        took = time.monotonic() - start
        holder = next(m for m in models if m.name == name)
        pub.log(f"{name}: version {version} serves ({', '.join(names)})"
                + (f", replaced {list(holder.previous)}" if holder.previous else "")
                + f" in {took:.1f} s")
        assert holder.served is not None
        result = PublishResult(name, version, holder.previous, holder.modes[0],
                               steps.with_policy(holder.served, name, [version]),
                               holder.production, took)
        if after_commit is not None:
            after_commit(result)
    return result


def _switch(pub: Publisher, name: str, version: int, models: list[Model],
            before: DeploymentState | None, check: shadow.Check | None,
            journal: Journal) -> None:
    """Steps 2, 3 and 5 of the module docstring: every model on ``version``, or every model
    as it was and :class:`DeployError` (or the signal, raised again)."""
    try:
        shadow.check(pub, models, version, journal,
                     lambda m: _stage_and_load(pub, m, version, journal), check, first=name)
        for model in models:
            if not model.undo.touched:
                _stage_and_load(pub, model, version, journal)
        for model in reversed(models):
            _drop_old(pub, model, version)
    except BaseException as exc:
        with lifecycle.held():
            undone = undo(pub, journal)
        if not isinstance(exc, (steps.StepFailed, OSError)):
            raise
        fail = exc if isinstance(exc, steps.StepFailed) else steps.StepFailed(
            "writing the version folders", str(exc))
        serving = before.version if before is not None else None
        rolled = "every model is rolled back: " + (
            f"version {serving} still serves" if serving
            else "nothing served before, nothing serves now")
        if not undone:
            rolled = ("Triton does not answer: every model's files are as before, and Triton "
                      f"is brought back to {f'version {serving}' if serving else 'none'} when "
                      "it answers again")
        raise DeployError(f"deploying version {version} of {name!r} (models: "
                          f"{', '.join(m.name for m in models)}) failed while {fail.step}; "
                          f"{rolled}. Triton said: {fail.message}") from None


def _stage_and_load(pub: Publisher, model: Model, version: int, journal: Journal) -> None:
    """Put version ``version`` in place under the model's own name and load it beside the
    serving versions."""
    model_dir = pub.model_dir(model.name)

    def restage() -> None:
        model.served = stage_into(model_dir, model, version, model.undo,
                                  lambda: journal.save(pub.repository))
        both = steps.with_policy(model.served, model.name, [*model.previous, version])
        model.undo.touched = True
        journal.save(pub.repository)
        write_config(model_dir, both)

    restage()
    beside = (f" beside its serving version(s) {list(model.previous)}"
              if model.previous else "")
    load_with_fallback(pub, model, model.name, version, restage,
                       f"loading {model.name!r}{beside}")


def _drop_old(pub: Publisher, model: Model, version: int) -> None:
    assert model.served is not None
    only = steps.with_policy(model.served, model.name, [version])
    write_config(pub.model_dir(model.name), only)
    if model.previous:
        pub.load(model.name, f"dropping version(s) {list(model.previous)} of {model.name!r}")
        steps.wait_ready(pub.client, model.name, version, pub.ready_timeout_s,
                         step=f"waiting for {model.name!r} to be READY")


def undo(pub: Publisher, journal: Journal) -> bool:
    """Every model back as the journal says it was, in reverse load order (module docstring,
    step 5); then the journal is removed. A model that served before is loaded again, never
    unloaded; one that was not loaded before is unloaded. False when Triton did not answer
    (it died or restarts): the files are as before, and the journal is kept, so that the next
    transaction on the repository brings Triton back too (repeatable)."""
    version = journal.version
    failed: list[str] = []
    for u in reversed(journal.models):
        if u.shadow is not None:
            try:
                pub.client.unload_model(u.shadow, wait_s=10)
            except ServerError as exc:
                failed.append(exc.reason)
            shutil.rmtree(pub.model_dir(u.shadow), ignore_errors=True)
    for u in reversed(journal.models):
        model_dir = pub.model_dir(u.name)
        version_dir = model_dir / str(version)
        if u.aside is not None and Path(u.aside).is_dir():
            shutil.rmtree(version_dir, ignore_errors=True)
            Path(u.aside).rename(version_dir)
        elif u.created:
            shutil.rmtree(version_dir, ignore_errors=True)
        if u.old_text is not None:
            steps.write_atomic(model_dir / CONFIG_FILE, u.old_text)
        for folder in u.staging:
            shutil.rmtree(folder, ignore_errors=True)
        if u.touched and u.serving_before:
            try:
                pub.client.load_model(u.name)
            except ServerError as exc:  # the old version serves through a failed load
                pub.log(f"{u.name}: restoring the previous config: {exc.reason}")
                failed.append(exc.reason)
        elif u.touched:
            try:
                pub.client.unload_model(u.name, wait_s=10)
            except ServerError as exc:
                failed.append(exc.reason)
        if not u.existed:
            shutil.rmtree(model_dir, ignore_errors=True)
    if failed and not answers(pub):
        return False
    journal.clear()
    return True


def answers(pub: Publisher) -> bool:
    """Whether Triton answers (its repository index can be read)."""
    try:
        pub.client.repository_index()
    except ServerError:
        return False
    return True


def finish(pub: Publisher, journal: Journal) -> None:
    """Step 4 of the module docstring (repeatable): the old version folders and the folders
    kept aside removed, every model's deployment.json written."""
    for u in journal.models:
        model_dir = pub.model_dir(u.name)
        steps.drop_other_versions(model_dir, journal.version)
        for folder in [*u.staging, *([u.aside] if u.aside else [])]:
            shutil.rmtree(folder, ignore_errors=True)
        record = journal.records.get(u.name)
        if record is not None:
            steps.write_atomic(model_dir / META_FILE, str(record["text"]))


def _records(name: str, version: int, models: list[Model], sha: str,
             meta: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """deployment.json of every model, as text (written by :func:`finish`)."""
    common = dict(meta or {})
    found: dict[str, dict[str, Any]] = {}
    for model in models:
        extra = ({**common, MODELS: [m.name for m in models], "source_digest": sha,
                  ENTRIES: [m.name for m in models if m.entry],
                  "model_serving": {m.name: m.modes[0] for m in models}}
                 if model.name == name else
                 {**common, PART_OF: name, "source_digest": steps.source_digest(model.source)})
        found[model.name] = {"text": Publisher.meta_text(model.name, version, model.modes[0],
                                                         extra)}
    return found


def _remove_left_behind(pub: Publisher, name: str, before: DeploymentState | None,
                        names: list[str]) -> None:
    """Models of the previous version that this one no longer has."""
    old = before.meta.get(MODELS) if before is not None else None
    for other in reversed([str(n) for n in old or [] if str(n) not in names]):
        state = pub.state(other)
        if state is not None and state.meta.get(PART_OF) == name:
            _unload_and_remove(pub, other)


def _unload_and_remove(pub: Publisher, name: str) -> None:
    with contextlib.suppress(ServerError):
        pub.client.unload_model(name, wait_s=30)
    shutil.rmtree(pub.model_dir(name), ignore_errors=True)
    pub.log(f"{name}: removed")


def remove(pub: Publisher, name: str) -> bool:
    """Unload and delete the deployment ``name``: its first entry, then every other model its
    record lists (those whose deployment.json says they are part of it). A model that is part
    of another deployment is refused: deleting it would break that one. False when there was
    nothing (idempotent). The caller holds the repository lock."""
    state = pub.state(name)
    if state is not None and state.meta.get(PART_OF):
        raise DeployError(f"{name!r} is a model of deployment {state.meta[PART_OF]!r}; "
                          "delete that deployment instead")
    model_dir = pub.model_dir(name)
    existed = model_dir.exists()
    try:
        pub.client.unload_model(name, wait_s=30)
    except ServerError as exc:
        if existed:
            raise DeployError(f"cannot unload {name!r}: {exc.reason}") from exc
    if existed:
        shutil.rmtree(model_dir)
        pub.log(f"{name}: removed")
    others = [str(m) for m in (state.meta.get(MODELS) or []) if str(m) != name] \
        if state is not None else []
    for other in reversed(others):
        found = pub.state(other)
        if found is not None and found.meta.get(PART_OF) == name:
            _unload_and_remove(pub, other)
    return existed
