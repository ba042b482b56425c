"""Store the study's model file once, whoever needs it first (tracking/model_files.py).

The first measured trial of an invocation calls :func:`ensure_stored`. Under the study
storage's lock (one per study, shared by every worker and every rerun) it reads the study's
``model_files`` attribute: when that names an upload whose digest equals this worker's model
file and which MLflow still holds, it is reused; otherwise the file is uploaded to this
invocation's parent run and the attribute updated. So a study of any number of trials, resumes
and workers stores the model once (again only when the model file itself changed).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import optuna

from tracker.search.storage import storage_lock
from tracker.tracking import model_files
from tracker.tracking.model_files import StoredModel
from tracker.tracking.runs import StudyRun
from tracker.triton.configuration import Configuration
from tracker.triton.formats import format_of
from tracker.triton.formats.base import CONFIG_FILE, copy_model_dir, link_or_copy

#: the stored folder of a configuration of several models (``study_model/configuration``)
CONFIGURATION_DIR = "configuration"


def assemble(conf: Configuration, dst: Path) -> Path:
    """One directory ``dst`` holding ``<model>/...`` for every model of ``conf``: each
    model's stored item (``format_of(info).stored(info)``) without its config.pbtxt (a
    model directory's contents, or the model file as ``<model>/1/<file name>``, where a model
    directory keeps it: promotion reads it there, tracking/winner.py). Made anew."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for info in conf.models:
        item = format_of(info).stored(info)
        target = dst / str(info.config.name)
        if item.is_dir():
            copy_model_dir(item, target)  # leaves out its config.pbtxt and caches
        else:
            (target / "1").mkdir(parents=True)
            link_or_copy(item, target / "1" / item.name)
        (target / CONFIG_FILE).unlink(missing_ok=True)
    return dst


def ensure_stored(study: optuna.Study, parent: StudyRun, model_file: Path) -> StoredModel:
    """The stored copy of ``model_file`` for this study (uploaded now if there is none)."""
    digest = model_files.sha256_of(model_file)

    def reuse() -> StoredModel | None:
        known = StoredModel.from_attr(study.user_attrs.get(model_files.STUDY_ATTR))
        if known is not None and known.sha256 == digest \
                and model_files.is_present(parent.client, known):
            return known
        return None

    storage = study._storage
    inner = getattr(storage, "_backend", storage)  # Optuna's cache wraps the RDB storage
    lock = (storage_lock(inner, f"tracker-model-{study.study_name}")
            if isinstance(inner, optuna.storages.RDBStorage) else contextlib.nullcontext())
    with lock:
        found = reuse()
        if found is None:
            found = model_files.upload(parent.client, parent.run_id, model_file, sha256=digest)
            study.set_user_attr(model_files.STUDY_ATTR, found.as_attr())
        return found
