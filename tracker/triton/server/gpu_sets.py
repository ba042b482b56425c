"""Which GPUs a Triton server was given, by identity (UUID), never by a guessed index.

A server names its GPUs in its own terms: a local server through ``CUDA_VISIBLE_DEVICES``
(CUDA ordinals, ``GPU-<uuid>`` prefixes, ``MIG-<uuid>``; ordinals counted in
``CUDA_DEVICE_ORDER``), a container through its DeviceRequest (NVML indices, UUIDs,
``<gpu>:<mig>``, or all), a remote server through the ``gpu_uuid`` labels of its ``nv_gpu_*``
metrics. This module turns each into a :class:`~tracker.triton.gpus.GpuSet` of the
:class:`~tracker.triton.gpus.Gpu` identities NVML reads (tracker/triton/gpus.py). Where NVML
does not work (no driver, no GPU) the set is empty and says why; a GPU that this machine does
not have is a :class:`GpuError`.

NVML numbers physical GPUs by PCI bus order (``nvidia-smi``'s indices); CUDA's default order
(``FASTEST_FIRST``) puts faster GPUs first and keeps PCI order between equal ones, so on a
machine of one GPU model both orders agree. On a machine of mixed models the speed heuristic
is not documented, and an ordinal is refused there unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tracker.errors import GpuError
from tracker.triton.gpus import Gpu, GpuSet, Inventory, inventory, nvml_session

_METRIC_UUID = re.compile(r'^nv_gpu_[a-z_]+\{[^}]*gpu_uuid="([^"]+)"')


# -- CUDA_VISIBLE_DEVICES -----------------------------------------------------------------

def cuda_order(inv: Inventory, order: str | None) -> list[Gpu]:
    """Physical GPUs in the order CUDA numbers them under ``CUDA_DEVICE_ORDER=order``."""
    by_bus = sorted(inv.physical, key=lambda g: (g.pci_bus_id or "", g.index or 0))
    mode = (order or "FASTEST_FIRST").strip().upper()
    if mode == "PCI_BUS_ID":
        return by_bus
    if mode != "FASTEST_FIRST":
        raise GpuError(f"CUDA_DEVICE_ORDER must be FASTEST_FIRST or PCI_BUS_ID, but got "
                       f"{order!r}")
    models = {(g.name, inv.capability.get(g.uuid)) for g in inv.physical}
    if len(models) > 1:
        names = ", ".join(sorted({str(g.name) for g in inv.physical}))
        raise GpuError(f"CUDA ordinals are ambiguous on this machine of different GPUs "
                       f"({names}): with CUDA_DEVICE_ORDER unset (FASTEST_FIRST) CUDA orders "
                       "them by an undocumented speed heuristic; set "
                       "CUDA_DEVICE_ORDER=PCI_BUS_ID (nvidia-smi's order) or name the GPUs by "
                       "UUID (GPU-...)")
    return by_bus  # one model: fastest first keeps PCI bus order


def _by_uuid(entry: str, candidates: Sequence[Gpu], what: str) -> Gpu:
    """CUDA's rule: a UUID entry may be any unique prefix of the device's UUID."""
    key = entry.lower()
    found = [g for g in candidates if g.uuid.lower().startswith(key)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(g.uuid for g in candidates) or "none"
    if found:
        raise GpuError(f"{what} {entry!r} matches {len(found)} devices "
                       f"({', '.join(g.uuid for g in found)}): give more of the UUID")
    raise GpuError(f"{what} {entry!r} is not a device of this machine (its "
                   f"{'MIG instances' if key.startswith('mig-') else 'GPUs'}: {known})")


def _refuse_mig_parent(inv: Inventory, gpu: Gpu, what: str) -> Gpu:
    if gpu.uuid in inv.mig:
        instances = ", ".join(m.uuid for m in inv.mig[gpu.uuid]) or "none created"
        raise GpuError(f"{what} is GPU {gpu.index} ({gpu.uuid}), which is in MIG mode: name "
                       f"one of its MIG instances by UUID instead ({instances})")
    return gpu


def resolve_cuda_visible(value: str | None, order: str | None, inv: Inventory) -> list[Gpu]:
    """The devices a CUDA process with ``CUDA_VISIBLE_DEVICES=value`` uses. None (unset):
    every device; ``""``: none; a negative ordinal hides itself and what follows (CUDA's
    rule). Unlike CUDA, an entry naming no device is an error here, not a silent cut."""
    if value is None:
        return list(inv.everything())
    out: list[Gpu] = []
    ordered: list[Gpu] | None = None
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            if value.strip():
                raise GpuError(f"CUDA_VISIBLE_DEVICES={value!r} has an empty entry")
            break
        what = f"CUDA_VISIBLE_DEVICES entry {entry!r}"
        if re.fullmatch(r"-?\d+", entry):
            ordinal = int(entry)
            if ordinal < 0:
                break
            ordered = ordered if ordered is not None else cuda_order(inv, order)
            if ordinal >= len(ordered):
                raise GpuError(f"{what}: this machine has {len(ordered)} GPUs (CUDA ordinals "
                               f"0..{len(ordered) - 1})" if ordered else
                               f"{what}: NVML sees no GPU on this machine")
            gpu = _refuse_mig_parent(inv, ordered[ordinal], what)
        elif entry.upper().startswith("GPU-"):
            gpu = _refuse_mig_parent(inv, _by_uuid(entry, inv.physical, what), what)
        elif entry.upper().startswith("MIG-"):
            if "/" in entry:
                raise GpuError(f"{what}: the old MIG-GPU-<uuid>/<gi>/<ci> form is not "
                               "supported; use the instance's MIG-<uuid> (nvidia-smi -L)")
            gpu = _by_uuid(entry, inv.migs(), what)
        else:
            raise GpuError(f"{what} is not a CUDA ordinal, GPU-<uuid> or MIG-<uuid>")
        if gpu not in out:
            out.append(gpu)
    return out


# -- Docker DeviceRequests ----------------------------------------------------------------

def resolve_device_requests(requests: Sequence[Mapping[str, Any]], inv: Inventory) -> list[Gpu]:
    """The devices the NVIDIA container runtime gives a container for these DeviceRequests
    (``docker.types.DeviceRequest`` is a dict): ``DeviceIDs`` are NVML indices (nvidia-smi's),
    ``<gpu>:<mig>`` pairs or UUIDs; ``Count`` -1 is every GPU, N the first N."""
    out: list[Gpu] = []
    for req in requests:
        if not any("gpu" in caps for caps in req.get("Capabilities") or []):
            continue
        ids = list(req.get("DeviceIDs") or [])
        count = int(req.get("Count") or 0)
        chosen: list[Gpu] = []
        if ids:
            chosen = [_device_id(str(i), inv) for i in ids]
        elif count:
            every = list(inv.everything())
            chosen = every if count < 0 else every[:count]
            if 0 < len(every) < count:
                raise GpuError(f"the device request asks for {count} GPUs, but this machine "
                               f"has {len(every)}")
        out.extend(g for g in chosen if g not in out)
    return out


def _device_id(entry: str, inv: Inventory) -> Gpu:
    what = f"server.gpus entry {entry!r} (a Docker device id)"
    if re.fullmatch(r"\d+", entry):
        index = int(entry)
        if index >= len(inv.physical):
            raise GpuError(f"{what}: this machine has {len(inv.physical)} GPUs (nvidia-smi "
                           f"indices 0..{len(inv.physical) - 1})" if inv.physical else
                           f"{what}: NVML sees no GPU on this machine")
        return _refuse_mig_parent(inv, inv.physical[index], what)
    pair = re.fullmatch(r"(\d+):(\d+)", entry)
    if pair:
        index, slot = int(pair.group(1)), int(pair.group(2))
        parent = inv.physical[index] if index < len(inv.physical) else None
        found = [m for m in inv.mig.get(parent.uuid, ()) if m.mig_index == slot] if parent else []
        if not found:
            raise GpuError(f"{what}: GPU {index} has no MIG instance {slot}")
        return found[0]
    if entry.upper().startswith("MIG-"):
        return _by_uuid(entry, inv.migs(), what)
    if entry.upper().startswith("GPU-"):
        return _refuse_mig_parent(inv, _by_uuid(entry, inv.physical, what), what)
    raise GpuError(f"{what} is not an index, <gpu>:<mig>, GPU-<uuid> or MIG-<uuid>")


# -- what the servers call ----------------------------------------------------------------

def _nvml_unavailable(source: str) -> GpuSet:
    return GpuSet((), f"{source}; NVML unavailable here, so no GPU is known")


def cuda_gpu_set(env: Mapping[str, str], nvml: Any = None) -> GpuSet:
    """The GPUs of a process started with environment ``env`` (a local server)."""
    value, order = env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")
    source = ("CUDA_VISIBLE_DEVICES unset (every GPU)" if value is None else
              f"CUDA_VISIBLE_DEVICES={value}" + (f", CUDA_DEVICE_ORDER={order}" if order else ""))
    with nvml_session(nvml) as n:
        if n is None:
            return _nvml_unavailable(source)
        return GpuSet(tuple(resolve_cuda_visible(value, order, inventory(n))), source)


def docker_gpu_set(requests: Sequence[Mapping[str, Any]], nvml: Any = None) -> GpuSet:
    """The GPUs a container gets from its DeviceRequests."""
    parts = [("DeviceIDs " + ",".join(map(str, r.get("DeviceIDs") or [])))
             if r.get("DeviceIDs") else f"Count {r.get('Count')}" for r in requests]
    source = "device request " + ("; ".join(parts) if parts else "none")
    if not requests:
        return GpuSet((), source)
    with nvml_session(nvml) as n:
        if n is None:
            return _nvml_unavailable(source)
        return GpuSet(tuple(resolve_device_requests(requests, inventory(n))), source)


def metrics_gpu_uuids(text: str) -> list[str]:
    """The ``gpu_uuid`` labels of the ``nv_gpu_*`` series in Triton's metrics, first seen
    first."""
    out: list[str] = []
    for line in text.splitlines():
        m = _METRIC_UUID.match(line.strip())
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def reported_gpu_set(metrics_text: str, nvml: Any = None) -> GpuSet:
    """The GPUs a server reports in its metrics, with NVML's identity where this machine
    has the device (the server runs here), else the UUID alone."""
    uuids = metrics_gpu_uuids(metrics_text)
    source = "the gpu_uuid labels of Triton's nv_gpu_* metrics"
    if not uuids:
        return GpuSet((), source + " (none reported)")
    with nvml_session(nvml) as n:
        inv = inventory(n) if n is not None else Inventory(())
    known = {g.uuid: g for g in (*inv.physical, *inv.migs())}
    return GpuSet(tuple(known.get(u, Gpu(uuid=u)) for u in uuids), source)
