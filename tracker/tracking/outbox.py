"""What a study writes to MLflow after a measurement, kept on disk until MLflow has it.

Optuna holds the study; MLflow mirrors it. A trial's run gets its metrics (the sweep's with
their steps), files (config.pbtxt, perf.csv, server.log), tags and its end only after the
trial is told to Optuna, and those writes are first kept in the study's outbox,
``.tracker/outbox/<study>/`` in the working folder, one folder per record: ``record.json``
and the files. A record is removed once MLflow has all of it; one the tracking server did not
take stays, and the next ``tracker tune`` or ``tracker confirm`` of the study writes it first
(:func:`replay`). Writing a record twice changes nothing: the metrics keep the timestamps
they were kept with (MLflow stores a metric point once), files replace themselves, tags and
the run's end are set again to the same values.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric

from tracker.errors import TrackingError
from tracker.tracking import runs
from tracker.tracking.machine import record_machine
from tracker.tracking.patience import TrackingUnavailable

ROOT = Path(".tracker") / "outbox"
RECORD = "record.json"
STUDY_RUN = "the study run"  # the label of the parent run's end
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def folder(study_name: str, root: Path | None = None) -> Path:
    """The outbox of study ``study_name`` (relative to the working folder unless ``root``)."""
    return (root or ROOT) / (_UNSAFE.sub("_", study_name).strip("._") or "study")


@dataclass
class RunWrites:
    """What one run gets: tags merged with its own (the machine's, on a shared parent),
    metrics, files, tags, and its end (FINISHED, FAILED, KILLED; None: left as it is)."""

    run_id: str
    merged: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    files: Mapping[str, str | bytes | Path] = field(default_factory=dict)
    tags: dict[str, object] = field(default_factory=dict)
    end: str | None = None


def keep(where: Path, label: str, writes: Sequence[RunWrites]) -> Path:
    """Store a record (``label`` names it to the user: "trial 3") and return its folder."""
    where.mkdir(parents=True, exist_ok=True)
    entry = where / f"{time.time_ns():020d}-{_UNSAFE.sub('_', label)}"
    body = []
    for i, write in enumerate(writes):
        for name, content in write.files.items():
            target = entry / "files" / str(i) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            elif isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        body.append({"run_id": write.run_id, "merged": write.merged,
                     "metrics": [[m.key, m.value, m.timestamp, m.step] for m in write.metrics],
                     "files": bool(write.files),
                     "tags": {k: runs.tag_value(v) for k, v in write.tags.items()},
                     "end": write.end})
    entry.mkdir(parents=True, exist_ok=True)
    partial = entry / (RECORD + ".part")
    partial.write_text(json.dumps({"label": label, "writes": body}))
    partial.replace(entry / RECORD)  # a record is whole or absent
    return entry


def deliver(client: MlflowClient, entry: Path) -> None:
    """Write a kept record to MLflow, then remove it (TrackingError, and the record kept,
    when MLflow does not take it)."""
    data = json.loads((entry / RECORD).read_text())
    for i, write in enumerate(data["writes"]):
        run_id = str(write["run_id"])
        if write["merged"]:
            record_machine(client, run_id, write["merged"])
        metrics = [Metric(k, float(v), int(t), int(s)) for k, v, t, s in write["metrics"]]
        runs.log_metrics(client, run_id, {}, extra=metrics)
        files = entry / "files" / str(i)
        if write["files"] and files.is_dir():
            runs.log_files(client, run_id, {str(f.relative_to(files)): f
                                            for f in sorted(files.rglob("*")) if f.is_file()})
        if write["tags"]:
            runs.set_tags(client, run_id, write["tags"])
        if write["end"]:
            runs.mlflow_call("end a run", client.set_terminated, run_id, write["end"])
    shutil.rmtree(entry, ignore_errors=True)


def write(client: MlflowClient, where: Path, label: str, writes: Sequence[RunWrites]) -> None:
    """Keep a record, then deliver it; TrackingUnavailable (the record kept) when the
    tracking server did not answer in the command's wait."""
    deliver(client, keep(where, label, writes))


def pending(where: Path) -> list[Path]:
    """The kept records, oldest first (a record being written is not one yet)."""
    if not where.is_dir():
        return []
    return sorted(p for p in where.iterdir() if (p / RECORD).is_file())


def labels(where: Path) -> list[str]:
    found: list[str] = []
    for entry in pending(where):
        with contextlib.suppress(OSError, ValueError, KeyError):
            label = str(json.loads((entry / RECORD).read_text())["label"])
            if label not in found:
                found.append(label)
    return found


def said(found: Sequence[str]) -> str:
    """Labels in words: "trial 3's records", "the records of trials 3, 4 and the study
    run's end"."""
    numbers = [label.removeprefix("trial ") for label in found if label.startswith("trial ")]
    parts = ([f"trial {numbers[0]}'s records"] if len(numbers) == 1 else
             [f"the records of trials {', '.join(numbers)}"] if numbers else [])
    parts += [f"{label}'s end" if label == STUDY_RUN else label
              for label in found if not label.startswith("trial ")]
    return " and ".join(parts)


def kept_text(where: Path) -> str:
    """"trial 3's records kept in PATH", or "" when nothing is kept."""
    found = labels(where)
    return f"{said(found)} kept in {where}" if found else ""


def replay(client: MlflowClient, where: Path, report: Callable[[str], None]) -> int:
    """Write every kept record of the study (the first thing ``tune`` and ``confirm`` do);
    the number written. A record MLflow refuses (its run deleted) is reported and left;
    TrackingUnavailable when the tracking server does not answer in the wait."""
    done: list[str] = []
    for entry in pending(where):
        try:
            label = str(json.loads((entry / RECORD).read_text())["label"])
            deliver(client, entry)
        except TrackingUnavailable:
            raise
        except (TrackingError, OSError, ValueError, KeyError) as exc:
            report(f"warning: the kept record {entry} was not written to MLflow: {exc}")
            continue
        done.append(label)
    if done:
        report(f"wrote what was kept to MLflow: {said(list(dict.fromkeys(done)))}")
    return len(done)


def stop_line(exc: TrackingUnavailable, where: Path, command: str) -> str:
    """The one line a command stops with when the tracking server stayed away."""
    kept = kept_text(where)
    what = kept if kept else "nothing measured is lost (the study is in Optuna)"
    return (f"{exc}; {what}; run `{command}` when it answers again: it writes what is kept "
            "and goes on")
