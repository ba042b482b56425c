"""A trial's parameters as what it serves: every model's config (the default's exactly, or
with the parameters applied), the ``FILE:KEY`` values written into its copy of the model
directory, its ``server/<option>`` values, and the production config texts and tags kept
with its run (:func:`candidate`: the three a measurement takes). The search's trials, the
confirmation and the conclusion all read them here, on the study's
:class:`~tracker.candidate.measurement.Bench`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tracker import tags
from tracker.candidate.measurement import Bench, CandidateConfig, serve_options, served_text
from tracker.spec.server_options import server_knob
from tracker.triton import model_config
from tracker.triton.formats import json_knobs

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelConfig


def configs(bench: Bench, params: dict[str, Any], baseline: bool
            ) -> tuple[dict[str, ModelConfig], str]:
    """(every model's config the trial stands for, by name in load order; the entry's served
    config.pbtxt text). The baseline is the default configuration exactly; other trials apply
    their params to it (``<model>/<field path>`` to that model)."""
    conf = bench.configuration
    cfgs = conf.defaults() if baseline else conf.apply(params)
    return cfgs, served_text(bench.spec, conf.entry_info, cfgs[conf.entry], bench.serving)


def candidate(bench: Bench, params: dict[str, Any], baseline: bool) -> CandidateConfig:
    """What a trial's parameters have measured: every model's config, its ``FILE:KEY`` and
    its ``server/<option>`` values (none for the baseline, whose server runs with
    server.options as the spec gives them)."""
    return CandidateConfig(configs(bench, params, baseline)[0], file_values(params, baseline),
                           {} if baseline else {k: v for k, v in params.items()
                                                if server_knob(k)})


def file_values(params: dict[str, Any], baseline: bool) -> dict[str, object]:
    """The ``FILE:KEY`` values the trial writes into its copy of the model directory; none
    for the baseline, which runs with the model's files as they are."""
    return {} if baseline else json_knobs.file_values(params)


def production_texts(bench: Bench, cfgs: dict[str, ModelConfig]) -> dict[str, str]:
    """Each model's production config.pbtxt text (what it is deployed with), a single
    model's too (the one-entry configuration)."""
    from tracker.triton.repository import served_configs

    conf = bench.configuration
    return {n: model_config.dumps(served_configs(conf.info(n), c, serving=bench.serving,
                                                 options=serve_options(bench.spec))[0])
            for n, c in cfgs.items()}


def configuration_tags(bench: Bench) -> dict[str, object]:
    """``tracker.models`` (every model, load order; one for a single model) and
    ``tracker.entry_model``: what promotion assembles the registered repository from."""
    conf = bench.configuration
    return {tags.MODELS: json.dumps(list(conf.names)), tags.ENTRY_MODEL: conf.entry}
