"""Knobs kept outside config.pbtxt, in a JSON file of the model directory: ``FILE:KEY``.

Some backends read their settings from a file beside the model rather than from config.pbtxt:
the vLLM backend its engine arguments from ``<version>/model.json``
(``gpu_memory_utilization``, ``max_num_seqs``, ...), a Python-backend model whatever JSON its
``model.py`` opens. A search-space key ``model.json:max_num_seqs`` names such a file, relative
to the model directory, and one top-level key of the JSON object in it; the same string is
the Optuna parameter and the MLflow param (tracker/spec/fields.py reads the form).

A bare file name is looked up in the version folders, highest first (the one Triton serves by
default), then at the top of the directory; a path (``2/model.json``) is taken as it is.
Only directory formats (the Python backend, config-driven backends) carry the user's
directory into each trial, so only they take file knobs. Each trial's copy of the file is
rewritten with the trial's values as a new file (never through the hard link to the user's
own), and the file as the server loaded it is logged as an artifact named by the knob's file
part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.errors import ModelError
from tracker.spec.fields import file_knob
from tracker.triton.formats.base import versions

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelInfo

#: the formats whose trials carry the user's model directory (tracker/triton/formats/directory.py)
DIRECTORY_FORMATS = ("python", "config")


def file_values(values: Mapping[str, object]) -> dict[str, object]:
    """The ``FILE:KEY`` knobs of a parameter dict, with their values."""
    return {k: v for k, v in values.items() if file_knob(k) is not None}


def files_of(keys: Iterable[str]) -> list[str]:
    """The files the ``FILE:KEY`` knobs among ``keys`` name, each once, in order."""
    out: dict[str, None] = {}
    for key in keys:
        found = file_knob(key)
        if found is not None:
            out[found[0]] = None
    return list(out)


def locate(model_dir: Path, file: str) -> Path:
    """The file a knob's file part names in ``model_dir``; ModelError saying where it looked
    when there is none."""
    if "/" in file:
        candidates = [model_dir / file]
    else:
        candidates = [model_dir / str(v) / file for v in versions(model_dir)]
        candidates.append(model_dir / file)
    for path in candidates:
        if path.is_file():
            return path
    where = ", ".join(str(p.relative_to(model_dir)) for p in candidates)
    raise ModelError(f"model directory {model_dir} has no {file} (looked for {where})")


def read_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ModelError when it is not readable JSON or not an object."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ModelError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object (keys and values) for file knobs, "
                         f"but it holds a {type(data).__name__}")
    return data


def problems(info: ModelInfo, keys: Iterable[str]) -> list[tuple[str, str]]:
    """(knob, why) for each ``FILE:KEY`` knob the model cannot take: a model whose trials do
    not carry its directory, a file it does not have, or a key the file does not hold."""
    wanted = [(k, found) for k in keys if (found := file_knob(k)) is not None]
    if not wanted:
        return []
    if info.format not in DIRECTORY_FORMATS:
        why = (f"file knobs need a model directory carried into each trial (python or config "
               f"format), but this model is read as {info.format} format, whose trial "
               "directory is made from its model file")
        return [(k, why) for k, _ in wanted]
    model_dir = Path(info.model_file)
    out: list[tuple[str, str]] = []
    for key, (file, name) in wanted:
        try:
            path = locate(model_dir, file)
            data = read_object(path)
        except ModelError as err:
            out.append((key, str(err)))
            continue
        if name not in data:
            out.append((key, f"{path} has no key {name!r}; its keys are "
                             f"{sorted(data) or 'none'}"))
    return out


def defaults(info: ModelInfo, keys: Iterable[str]) -> dict[str, object]:
    """The value each ``FILE:KEY`` knob has in the user's file (what the default configuration
    runs with); ModelError as :func:`problems` would say."""
    for key, why in problems(info, keys):
        raise ModelError(f"{key}: {why}")
    out: dict[str, object] = {}
    for key in keys:
        found = file_knob(key)
        if found is not None:
            out[key] = read_object(locate(Path(info.model_file), found[0]))[found[1]]
    return out


def write(info: ModelInfo, model_dir: Path, values: Mapping[str, object],
          files: Iterable[str] = ()) -> dict[str, Path]:
    """Set each ``FILE:KEY`` of ``values`` in the trial's copy ``model_dir`` of the model's
    directory, and return {file part: path} of every file named by ``values`` or ``files``
    (what the trial logs). A file whose values all equal the user's is left as it is."""
    edits: dict[str, dict[str, object]] = {file: {} for file in files}
    for key, value in values.items():
        found = file_knob(key)
        if found is not None:
            edits.setdefault(found[0], {})[found[1]] = value
    if not edits:
        return {}
    if info.format not in DIRECTORY_FORMATS:
        raise ModelError(f"file knobs {sorted(edits)} need a model directory carried into "
                         f"each trial, but model {info.config.name!r} is {info.format} format")
    out: dict[str, Path] = {}
    for file, keys in edits.items():
        path = locate(model_dir, file)
        data = read_object(path)
        missing = sorted(k for k in keys if k not in data)
        if missing:
            raise ModelError(f"{path} has no key {missing[0]!r}; its keys are {sorted(data)}")
        if any(data[k] != v or type(data[k]) is not type(v)
               for k, v in keys.items()):
            data.update(keys)
            tmp = path.with_name(f".{path.name}.trial")
            tmp.write_text(json.dumps(data, indent=2) + "\n")
            os.replace(tmp, path)  # a new file: the user's, hard-linked here, stays as it was
        out[file] = path
    return out
