"""The capability matrix as data: the model kinds a study takes (rows), the operations a user
runs on a study of one (columns), and one cell per pair saying what the test suite shows.

A cell is one of

- :class:`Works`: the named tests run the operation end to end on that kind (a real Triton,
  real MLflow and Optuna stores, except for ``tracker check``, which starts no server for most
  kinds) and it works;
- :class:`Refused`: the step cannot exist for that kind, and ``tracker check`` (or the step's
  own command, before anything runs) says so; the named test asserts that message;
- :class:`Hole`: neither works as a tested step nor is refused yet; the cell says what
  happens today.

``python -m tests.matrix.table`` writes docs/matrix.md from these tables;
tests/matrix/test_matrix.py checks that every pair has a cell, that every test a cell names
exists, and that the page is what :func:`page` makes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "matrix.md"
COMMAND = "python -m tests.matrix.table"


@dataclass(frozen=True)
class Kind:
    """A kind of model: what it is in a study spec's terms (a row of the matrix)."""

    key: str
    name: str   # the row's label in the docs
    what: str   # one sentence for users


@dataclass(frozen=True)
class Operation:
    """Something a user does with a study of a model (a column of the matrix)."""

    key: str
    name: str   # the column's header in the docs
    what: str   # one sentence for users
    group: str  # the docs table it is a column of (GROUPS)


@dataclass(frozen=True)
class Works:
    """The operation works on that kind: ``tests`` run it end to end (``path::function``,
    a parametrized id allowed); ``note`` says in a few words what they show."""

    tests: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class Refused:
    """The step cannot exist for that kind: ``message`` is a fragment of what the refusing
    command says, ``why`` the reason in words, ``test`` the test that asserts the message."""

    message: str
    why: str
    test: str


@dataclass(frozen=True)
class Hole:
    """Neither works as a tested step nor is refused yet: ``what`` happens today."""

    what: str


Cell = Works | Refused | Hole


def t(path: str, name: str) -> str:
    """The test id ``tests/<path>::<name>``."""
    return f"tests/{path}::{name}"


# ---- the rows ---------------------------------------------------------------------------------

KINDS: tuple[Kind, ...] = (
    Kind("onnx", "ONNX file",
         "A `.onnx` file: served by onnxruntime, or by the Python-backend shim."),
    Kind("python", "Python-backend directory",
         "A model directory with its config.pbtxt and `1/model.py`, served as written."),
    Kind("autocomplete", "auto-complete directory",
         "A Python-backend directory without config.pbtxt, completed by Triton."),
    Kind("decoupled", "decoupled (streaming)",
         "`model_transaction_policy { decoupled: true }`: each request answered by a stream."),
    Kind("stateful", "stateful (sequence batcher)",
         "A sequence batcher: requests come in sequences under a correlation ID."),
    Kind("stateful_decoupled", "stateful and decoupled",
         "A sequence batcher and a decoupled policy: each step of a sequence streams."),
    Kind("ensemble", "ensemble",
         "An ensemble and its steps, tuned together."),
    Kind("bls", "BLS",
         "A Python model that calls another model through Business Logic Scripting "
         "(`model.composing` names the callee)."),
    Kind("entries", "several entry models",
         "`model.name: [a, b]`: independent models on one server, each under its own load."),
    Kind("entries_decoupled", "several entry models, one decoupled",
         "Several entry models of which one streams."),
    Kind("file_knobs", "file knobs (`model.json`)",
         "Knobs that are keys of a JSON file beside the model (`model.json:KEY`)."),
    Kind("config_driven", "config-driven backend (libtorch)",
         "A backend the embedded server lacks (PyTorch, TensorFlow, TensorRT, OpenVINO), read "
         "from its config.pbtxt; it runs in docker or remote mode, untested there."),
)

# ---- the columns ------------------------------------------------------------------------------

#: the docs' tables, each a group of operations: (key, heading)
GROUPS: tuple[tuple[str, str], ...] = (
    ("study", "Checking and tuning"),
    ("records", "What a study leaves, and running it again"),
    ("serving", "Registry and serving"),
)

OPERATIONS: tuple[Operation, ...] = (
    Operation("check", "`tracker check`",
              "The spec and the model checked before anything starts.", "study"),
    Operation("check_outputs", "`tracker check --outputs`",
              "The default served and asked twice: which outputs are not deterministic (a "
              "bare ✔: it answers the same).", "study"),
    Operation("tune", "tune, output check on",
              "`tracker tune`: every configuration answers the default's probes before it is "
              "measured.", "study"),
    Operation("paired", "paired confirmation",
              "The best and the default side by side in one server, in pairs of short "
              "blocks; the pairs' ratios on the parent run.", "study"),
    Operation("rounds", "rounds confirmation",
              "The top configurations and the default re-measured in interleaved rounds (for "
              "a kind confirmed in pairs, with `tracker confirm --new` after them).", "study"),
    Operation("capacity", "capacity at the SLA",
              "`objectives: {perf_capacity: maximize}`: each configuration's highest open-loop "
              "rate within the constraints, with replicas and cost.",
              "study"),
    Operation("report", "report.html and plots",
              "The parent run's report, trials.csv and plots.", "records"),
    Operation("resume", "resume after SIGKILL",
              "A tuner killed with SIGKILL in its second trial and run again: that trial is "
              "failed and measured again, the study completes.", "records"),
    Operation("mlflow_run", "`mlflow run`",
              "The study run as an MLflow project entry point, again after a kill.",
              "records"),
    Operation("promote", "promote (register)",
              "`tracker promote`: the confirmed winner registered as a model version.",
              "serving"),
    Operation("deploy", "deploy, output check on",
              "The version loaded beside the serving one and asked the study's probes before "
              "it takes the traffic.", "serving"),
    Operation("watch", "`tracker watch`",
              "A registry stage transition or alias move deploys the version it names.",
              "serving"),
    Operation("rollback", "rollback",
              "A version that fails to load or answers unlike its study's is rolled back: the "
              "serving version and the registry's pointers stay.", "serving"),
    Operation("pyfunc", "`mlflow.pyfunc` predict",
              "`mlflow.pyfunc.load_model(...).predict(...)` on the registered version; where "
              "refused, `mlflow deployments predict` answers.",
              "serving"),
    Operation("predict", "`mlflow deployments predict`",
              "`mlflow deployments predict -t triton` (or the client's predict) against the "
              "serving Triton.", "serving"),
)

# ---- the tests the cells name -----------------------------------------------------------------

ORT_THREADS = t("triton/test_formats.py",
                "test_check_refuses_ort_threads_with_a_searched_thread_count")
TUNE_CHECKS = t("tuning/test_tune_check.py",
                "test_tune_refuses_what_check_refuses_before_any_trial")
NOISY = t("outputs/test_trials.py",
          "test_check_outputs_finds_an_output_that_is_not_deterministic")
BATCH_DEPENDENT = t("outputs/test_trials.py",
                    "test_configurations_that_batch_a_batch_dependent_model_fail_their_check")
DETERMINISTIC = t("outputs/test_trials.py",
                  "test_a_deterministic_model_passes_every_configuration")
PAIRED_EQUIVALENT = t("confirm/test_confirm_tune.py",
                      "test_a_study_where_nothing_beats_the_default_is_equivalent")
ROUNDS_RESUMED = t("confirm/test_confirm_tune.py",
                   "test_tune_confirms_then_tracker_confirm_reproduces_and_resumes")
MLFLOW_RUN = t("tuning/test_tune_study.py", "test_mlflow_run_one_parent_with_a_child_per_trial")
MLFLOW_RUN_URI = t("project/test_mlflow_project.py",
                   "test_main_project_spec_from_a_repository_uri")
KILLED_WORKER = t("tuning/test_scaleout_tune.py", "test_killed_worker_trial_is_reclaimed")
PROMOTE_SWITCH = t("deploy/test_triton_target.py",
                   "test_promote_switches_without_failed_requests_and_rolls_back_a_refused_config")
PYFUNC = t("tracking/test_mlflow_native.py",
           "test_promote_registers_a_model_mlflow_loads_from_the_stored_file")
DEPLOY_CHECK = t("deploy/test_deploy_check.py",
                 "test_an_altered_version_is_refused_and_the_old_one_keeps_serving")
WATCH = t("deploy/test_watch.py", "test_watch_deploys_stage_and_alias_changes_once")
WATCH_CONFLICT = t("deploy/test_watch.py",
                   "test_conflicting_stage_and_alias_changes_the_alias_wins")
WATCH_ROLLBACK = t("deploy/test_watch.py",
                   "test_legacy_stage_button_then_new_ui_alias_rollback")
FAULTS = t("deploy/test_faults.py",
           "test_a_fault_at_any_step_leaves_one_version_serving_everywhere")
TARGET = t("deploy/test_triton_target.py", "test_target_create_update_get_predict_delete")

PYTHON_TUNED = t("tuning/test_tune_formats.py",
                 "test_python_backend_model_is_checked_tuned_promoted_and_answers")
PREPROCESS_CHECK = t("project/test_projects.py",
                     "test_image_preprocess_checks_as_a_python_model_with_its_crop_knob")
FILE_KNOBS = t("tuning/test_tune_file_knobs.py",
               "test_a_key_of_the_models_json_file_is_tuned_and_acts")
FILE_KNOBS_CHECK = t("triton/test_json_knobs.py",
                     "test_check_accepts_a_file_and_key_the_model_has")
FILE_KNOBS_REFUSED = t("triton/test_json_knobs.py",
                       "test_check_refuses_a_file_or_key_the_model_does_not_have")

AUTO = t("tuning/test_tune_nvidia_examples.py",
         "test_auto_complete_example_without_config_is_tuned_promoted_and_answers")
AUTO_ONE_START = t("triton/test_autocomplete.py",
                   "test_triton_completes_both_examples_with_one_start")

STREAM_CHECK = t("tuning/test_tune_streaming.py",
                 "test_check_says_a_decoupled_directory_is_streamed_and_which_metrics_apply")
STREAM_TUNED = t("tuning/test_tune_streaming.py",
                 "test_a_streaming_model_is_tuned_under_a_ttft_limit")
STREAM_PROBES = t("outputs/test_sequences.py",
                  "test_a_decoupled_model_is_probed_with_whole_response_streams")

SEQUENCE_CHECK = t("search/test_sequence_check.py",
                   "test_check_shows_controls_sequences_and_knobs")
SEQUENCE_STUDY = t("outputs/test_sequences.py",
                   "test_a_study_never_ranks_a_configuration_whose_sequences_differ_best")
NVIDIA_SEQUENCES = tuple(
    t("tuning/test_tune_nvidia_examples.py",
      f"test_nvidia_sequence_model_is_tuned_promoted_and_answers_a_whole_sequence[{name}]")
    for name in ("simple_dyna_sequence", "simple_sequence"))
SEQUENCE_PREDICT = t("measure/test_sequences.py",
                     "test_predict_sends_the_inputs_first_axis_as_the_steps_of_one_sequence")

PIPELINE_CHECK = t("tuning/test_tune_pipeline.py",
                   "test_check_names_the_pipeline_and_refuses_bad_knobs")
DENSENET_PIPELINE = t("project/test_projects.py",
                      "test_densenet_pipeline_builds_checks_and_its_grid_applies")
PIPELINE_TUNED = t("tuning/test_tune_pipeline.py",
                   "test_ensemble_is_tuned_with_per_model_params_configs_and_split")
PIPELINE_PROMOTED = t("deploy/test_pipeline_deploy.py",
                      "test_promote_deploys_every_model_and_rolls_every_model_back")
PIPELINE_TARGET = t("deploy/test_pipeline_deploy.py",
                    "test_target_deploys_a_pipeline_predicts_strings_and_rolls_back_a_refused_entry")
PIPELINE_REFUSED = t("deploy/test_pipeline_deploy.py",
                     "test_a_pipeline_version_that_answers_unlike_the_study_is_refused")
PIPELINE_WATCH = t("deploy/test_pipeline_deploy.py",
                   "test_watch_deploys_a_pipeline_when_the_alias_moves")

BLS = t("tuning/test_tune_bls.py", "test_a_bls_model_and_its_callee_are_tuned_together")

JOINT = t("tuning/test_tune_joint.py",
          "test_two_models_are_measured_together_and_the_weighted_gain_is_optimised")
JOINT_KNOB = t("tuning/test_tune_joint.py", "test_several_models_refuse_a_shared_load_knob")
TWO_MODELS = t("project/test_projects.py", "test_two_models_builds_checks_and_its_grid_applies")
ENTRIES_DEPLOY = t("deploy/test_entries_deploy.py",
                   "test_two_entry_models_are_one_version_switched_and_rolled_back_together")
JOINT_STREAMING = t("tuning/test_tune_joint_streaming.py",
                    "test_a_decoupled_entry_among_two_is_streamed")

DEPLOY_STREAM = t("deploy/test_deploy_kinds.py",
                  "test_a_decoupled_model_is_deployed_over_a_stream_and_a_different_stream_refused")
DEPLOY_STREAM_ENTRY = t("deploy/test_deploy_kinds.py",
                        "test_a_decoupled_entry_among_two_is_deployed_and_streams")
DEPLOY_SEQUENCES = t("deploy/test_deploy_kinds.py",
                     "test_a_stateful_model_is_deployed_with_whole_sequences_under_new_ids")

TORCHSCRIPT = t("triton/test_formats.py",
                "test_torchscript_on_the_local_server_is_refused_by_check")

SEQUENCE_KINDS = {name: t("deploy/test_deploy_kinds.py",
                          "test_tritons_sequence_kinds_are_checked_tuned_with_the_output_check_"
                          f"and_promoted[{name}]")
                  for name in ("bcounter", "dcounter", "iterative")}
AFTER = t("tuning/test_after_search.py",
          "test_check_says_what_the_confirmation_and_pyfunc_do_for_each_kind")


def walk(kind: str) -> str:
    """The walk of ``kind`` from its study to the watcher (tests/matrix/test_walks.py)."""
    return t("matrix/test_walks.py", f"test_each_kind_walks_from_its_study_to_the_watcher[{kind}]")

# ---- the cells --------------------------------------------------------------------------------

#: no test runs the operation on the kind
UNTESTED = Hole("untested")
#: ``tracker check`` refuses pyfunc for a model that is not one ONNX file, saying why
PYFUNC_LINE = "mlflow.pyfunc: refused: "
NO_PYFUNC = Refused(PYFUNC_LINE, "no ONNX file to run in-process", AFTER)
NO_PYFUNC_WALKED = {kind: dataclasses.replace(NO_PYFUNC, test=walk(kind))
                    for kind in ("autocomplete", "file_knobs", "stateful_decoupled")}
NO_PYFUNC_PIPELINE = Refused(PYFUNC_LINE, "several models that only Triton runs together",
                             AFTER)
BLS_IN_ROUNDS = Refused("confirmation: in rounds, not paired: BLS model",
                        "a BLS model's code names its callees, so its copy would call the "
                        "default's", AFTER)
PIPELINE_PAIRED = ("tests/confirm/test_confirm_pipeline.py::"
                   "test_an_ensemble_is_confirmed_in_pairs_with_its_steps_renamed")
NO_PYTORCH = Refused(
    "'pytorch' backend",
    "the embedded server lacks pytorch",
    TORCHSCRIPT)


CAPACITY_TUNED = t("tuning/test_tune_capacity.py",
                   "test_a_capacity_study_searches_rates_and_prices_the_capacity")
CAPACITY_WORKS = Works((CAPACITY_TUNED,), "a trace replayed, rates bisected, replicas and cost")


def capacity_searched(kind: str, note: str = "") -> Works:
    """A kind's capacity cell: the parametrized capacity study of that kind's model."""
    return Works((t("tuning/test_tune_capacity_kinds.py",
                    f"test_each_kinds_capacity_is_searched_at_its_sla[{kind}]"),), note)


NO_CAPACITY_STATEFUL = Refused(
    "needs requests that arrive on their own",
    "sequences wait for a free slot, so the load is not open loop",
    t("tuning/test_tune_capacity.py", "test_check_refuses_capacity_for_a_stateful_model"))
NO_CAPACITY_ENTRIES = Refused(
    "are judged by one score, weighted_gain",
    "judged by one score; a capacity is one entry's",
    t("tuning/test_tune_capacity.py",
      "test_several_entry_models_are_refused_a_capacity_objective"))


def _row(cells: Mapping[str, Cell], default: Cell = UNTESTED) -> dict[str, Cell]:
    """A row: ``cells`` by operation key, every other operation ``default``."""
    return {op.key: cells.get(op.key, default) for op in OPERATIONS}


ROWS: dict[str, dict[str, Cell]] = {
    "onnx": _row({
        "capacity": CAPACITY_WORKS,
        "check": Works((ORT_THREADS, TUNE_CHECKS), "tune refuses what check refuses"),
        "check_outputs": Works((NOISY,), "names a non-deterministic output"),
        "tune": Works((BATCH_DEPENDENT, DETERMINISTIC),
                      "answers unlike the default: failed, unmeasured"),
        "paired": Works((PAIRED_EQUIVALENT,), "two copies in one server, alternating"),
        "rounds": Works((ROUNDS_RESUMED,), "`tracker confirm` continues and resumes it"),
        "report": Works((MLFLOW_RUN, ROUNDS_RESUMED), "the report says what the note says"),
        "resume": Works((KILLED_WORKER,), "two workers: the killed one's trial retried"),
        "mlflow_run": Works((MLFLOW_RUN, MLFLOW_RUN_URI), "from a clone or a repository URI"),
        "promote": Works((PROMOTE_SWITCH, PYFUNC), "stage and alias on the winner"),
        "deploy": Works((DEPLOY_CHECK, PROMOTE_SWITCH),
                        "an altered version is refused; no failed request"),
        "watch": Works((WATCH, WATCH_CONFLICT), "a stage or an alias; the alias wins"),
        "rollback": Works((PROMOTE_SWITCH, WATCH_ROLLBACK, FAULTS),
                          "also after a kill; moving the alias back redeploys"),
        "pyfunc": Works((PYFUNC,), "onnxruntime on CPU"),
        "predict": Works((TARGET,), "a dict, a DataFrame, the CLI's JSON"),
    }),
    "python": _row({
        "capacity": capacity_searched("python"),
        "check": Works((PYTHON_TUNED, PREPROCESS_CHECK), "its parameters are knobs"),
        "check_outputs": Works((walk("python"),)),
        "tune": Works((PYTHON_TUNED, FILE_KNOBS, walk("python")),
                      "its model.py as written, the output check on"),
        "paired": Works((walk("python"),)),
        "report": Works((walk("python"),)),
        "promote": Works((PYTHON_TUNED, walk("python")), "deployed, and it answers"),
        "deploy": Works((walk("python"),)),
        "watch": Works((walk("python"),)),
        "rollback": Works((walk("python"),)),
        "pyfunc": NO_PYFUNC,
        "predict": Works((walk("python"),), "a dict of arrays"),
        "resume": Works((walk("python"),)),
        "rounds": Works((walk("python"),)),
        "mlflow_run": Works((walk("python"),)),
    }),
    "autocomplete": _row({
        "capacity": capacity_searched("autocomplete"),
        "check": Works((AUTO, AUTO_ONE_START), "inputs and outputs read from Triton"),
        "check_outputs": Works((walk("autocomplete"),)),
        "tune": Works((AUTO, walk("autocomplete")),
                      "trials built on the completed config"),
        "paired": Works((walk("autocomplete"),)),
        "report": Works((walk("autocomplete"),)),
        "promote": Works((AUTO,), "the completed config is registered"),
        "deploy": Works((AUTO, walk("autocomplete")),
                        "the version passes the check and answers"),
        "watch": Works((walk("autocomplete"),)),
        "rollback": Works((walk("autocomplete"),)),
        "pyfunc": NO_PYFUNC_WALKED["autocomplete"],
        "predict": Works((walk("autocomplete"),), "both outputs"),
        "resume": Works((walk("autocomplete"),)),
        "rounds": Works((walk("autocomplete"),)),
        "mlflow_run": Works((walk("autocomplete"),)),
    }),
    "decoupled": _row({
        "capacity": capacity_searched("decoupled", "the SLA on time to first token"),
        "check": Works((STREAM_CHECK,), "says it is streamed and which metrics apply"),
        "check_outputs": Works((walk("decoupled"),)),
        "tune": Works((STREAM_TUNED, STREAM_PROBES), "probes compared as whole streams"),
        "paired": Works((walk("decoupled"),), "two streaming copies"),
        "report": Works((STREAM_TUNED,), "time to first token and inter-token latency"),
        "promote": Works((DEPLOY_STREAM,), "its served version streams"),
        "deploy": Works((DEPLOY_STREAM,), "check and probes over a gRPC stream"),
        "watch": Works((walk("decoupled"),)),
        "rollback": Works((DEPLOY_STREAM,), "one that streams otherwise is refused"),
        "pyfunc": NO_PYFUNC,
        "predict": Works((DEPLOY_STREAM,), "each output is its responses, stacked"),
        "resume": Works((walk("decoupled"),)),
        "rounds": Works((walk("decoupled"),)),
        "mlflow_run": Works((walk("decoupled"),)),
    }),
    "stateful": _row({
        "capacity": NO_CAPACITY_STATEFUL,
        "check": Works((SEQUENCE_CHECK, SEQUENCE_KINDS["bcounter"]),
                       "its controls, sequence lengths and knobs"),
        "check_outputs": Works((SEQUENCE_KINDS["bcounter"],),
                               "asked twice, on two loads of the model"),
        "tune": Works((SEQUENCE_STUDY, *NVIDIA_SEQUENCES, DEPLOY_SEQUENCES,
                       SEQUENCE_KINDS["bcounter"]),
                      "whole sequences; no ID twice on one load"),
        "paired": Works((walk("stateful"),)),
        "report": Works((walk("stateful"),)),
        "promote": Works((*NVIDIA_SEQUENCES, DEPLOY_SEQUENCES), "Triton's own sequence examples"),
        "deploy": Works((DEPLOY_SEQUENCES, *NVIDIA_SEQUENCES),
                        "whole sequences, IDs new on the server"),
        "watch": Works((walk("stateful"),)),
        "rollback": Works((walk("stateful"),)),
        "pyfunc": NO_PYFUNC,
        "predict": Works((walk("stateful"), SEQUENCE_PREDICT),
                         "rows: the steps of one sequence"),
        "resume": Works((walk("stateful"),)),
        "rounds": Works((walk("stateful"),)),
        "mlflow_run": Works((walk("stateful"),)),
    }),
    "stateful_decoupled": _row({
        "capacity": NO_CAPACITY_STATEFUL,
        "check": Works((SEQUENCE_KINDS["dcounter"], SEQUENCE_KINDS["iterative"]),
                       "streamed steps; an iterative model: one request"),
        "check_outputs": Works((SEQUENCE_KINDS["dcounter"], SEQUENCE_KINDS["iterative"]),
                               "each step's response stream compared"),
        "tune": Works((SEQUENCE_KINDS["dcounter"], SEQUENCE_KINDS["iterative"]),
                      "the default measured, the output check on"),
        "paired": Works((walk("stateful_decoupled"),)),
        "report": Works((walk("stateful_decoupled"),)),
        "promote": Works((SEQUENCE_KINDS["dcounter"], SEQUENCE_KINDS["iterative"]),
                         "the served version streams each step"),
        "deploy": Works((SEQUENCE_KINDS["dcounter"], walk("stateful_decoupled")),
                        "the streamed sequences asked first"),
        "watch": Works((walk("stateful_decoupled"),)),
        "rollback": Works((walk("stateful_decoupled"),)),
        "pyfunc": NO_PYFUNC_WALKED["stateful_decoupled"],
        "predict": Works((walk("stateful_decoupled"),),
                         "rows: the steps of one sequence, each streamed"),
        "resume": Works((walk("stateful_decoupled"),)),
        "mlflow_run": Works((walk("stateful_decoupled"),)),
        "rounds": Works((walk("stateful_decoupled"),)),
    }),
    "ensemble": _row({
        "capacity": capacity_searched("ensemble", "the SLA on the ensemble's latency"),
        "check": Works((PIPELINE_CHECK, DENSENET_PIPELINE), "names the steps and their knobs"),
        "tune": Works((PIPELINE_TUNED,), "per-step params, configs and time split"),
        "paired": Works((PIPELINE_PAIRED,), "each copy calls its own steps"),
        "report": Works((PIPELINE_TUNED,), "each step's share of the latency"),
        "promote": Works((PIPELINE_TUNED, PIPELINE_PROMOTED), "every model, composing ones first"),
        "deploy": Works((PIPELINE_REFUSED, PIPELINE_PROMOTED), "the probes go to the entry"),
        "watch": Works((PIPELINE_WATCH,)),
        "rollback": Works((PIPELINE_PROMOTED, PIPELINE_TARGET),
                          "every model back on the serving one"),
        "pyfunc": NO_PYFUNC_PIPELINE,
        "predict": Works((PIPELINE_TARGET,), "string outputs as JSON"),
        "check_outputs": Works((walk("ensemble"),)),
        "resume": Works((walk("ensemble"),)),
        "rounds": Works((walk("ensemble"),)),
        "mlflow_run": Works((walk("ensemble"),)),
    }),
    "bls": _row({
        "capacity": capacity_searched("bls"),
        "check": Works((BLS, AFTER), "names the entry and its callee"),
        "check_outputs": Works((walk("bls"),)),
        "tune": Works((BLS,), "the callee measured in the same windows"),
        "paired": BLS_IN_ROUNDS,
        "rounds": Works((walk("bls"),), "check says rounds and why; the study does"),
        "report": Works((walk("bls"),)),
        "promote": Works((walk("bls"),), "BLS model and callee in one version"),
        "deploy": Works((walk("bls"),), "the probes go to the BLS model"),
        "watch": Works((walk("bls"),)),
        "rollback": Works((walk("bls"),)),
        "pyfunc": NO_PYFUNC_PIPELINE,
        "predict": Works((walk("bls"),), "through the BLS model to its callee"),
        "resume": Works((walk("bls"),)),
        "mlflow_run": Works((walk("bls"),)),
    }),
    "entries": _row({
        "capacity": NO_CAPACITY_ENTRIES,
        "check": Works((JOINT, JOINT_KNOB, TWO_MODELS), "a shared load knob is refused"),
        "check_outputs": Works((walk("entries"),)),
        "tune": Works((JOINT,), "Model Analyzer's weighted gain"),
        "paired": Works((JOINT, walk("entries")), "each block drives every entry of a copy"),
        "rounds": Works((walk("entries"),)),
        "report": Works((JOINT,), "a column and a trace per entry"),
        "promote": Works((JOINT, ENTRIES_DEPLOY), "one version holds every model"),
        "deploy": Works((walk("entries"),), "the first entry's probes asked"),
        "watch": Works((ENTRIES_DEPLOY,), "no failed request during the switch"),
        "rollback": Works((ENTRIES_DEPLOY,), "both models back on the serving one"),
        "pyfunc": NO_PYFUNC_PIPELINE,
        "predict": Works((ENTRIES_DEPLOY,), "each entry by its name"),
        "resume": Works((walk("entries"),)),
        "mlflow_run": Works((walk("entries"),)),
    }),
    "entries_decoupled": _row({
        "capacity": NO_CAPACITY_ENTRIES,
        "check": Works((AFTER, walk("entries_decoupled")), "paired; no pyfunc, and why"),
        "check_outputs": Works((walk("entries_decoupled"),)),
        "tune": Works((JOINT_STREAMING, DEPLOY_STREAM_ENTRY),
                      "one entry streamed, the other unary"),
        "paired": Works((walk("entries_decoupled"),), "streamed in each block"),
        "rounds": Works((walk("entries_decoupled"),)),
        "report": Works((walk("entries_decoupled"),)),
        "promote": Works((DEPLOY_STREAM_ENTRY,), "both entries serve the version"),
        "deploy": Works((DEPLOY_STREAM_ENTRY,), "checked; the decoupled entry streams"),
        "watch": Works((walk("entries_decoupled"),)),
        "rollback": Works((walk("entries_decoupled"),)),
        "pyfunc": NO_PYFUNC_PIPELINE,
        "predict": Works((walk("entries_decoupled"),), "the unary entry by its name"),
        "resume": Works((walk("entries_decoupled"),)),
        "mlflow_run": Works((walk("entries_decoupled"),)),
    }),
    "file_knobs": _row({
        "capacity": capacity_searched("file_knobs"),
        "check": Works((FILE_KNOBS_CHECK, FILE_KNOBS_REFUSED), "the file and key checked"),
        "check_outputs": Works((walk("file_knobs"),)),
        "tune": Works((FILE_KNOBS, walk("file_knobs")),
                      "a copy per trial; the user's file stays"),
        "paired": Works((walk("file_knobs"),), "each copy with its own file"),
        "report": Works((walk("file_knobs"),)),
        "promote": Works((walk("file_knobs"),), "the winner's file in the version"),
        "deploy": Works((walk("file_knobs"),)),
        "watch": Works((walk("file_knobs"),)),
        "rollback": Works((walk("file_knobs"),)),
        "pyfunc": NO_PYFUNC_WALKED["file_knobs"],
        "predict": Works((walk("file_knobs"),), "a dict of arrays"),
        "resume": Works((walk("file_knobs"),)),
        "rounds": Works((walk("file_knobs"),)),
        "mlflow_run": Works((walk("file_knobs"),)),
    }),
    "config_driven": _row({
        "check": Works((TORCHSCRIPT,), "docker: accepted, its knobs listed; local: refused"),
    }, default=NO_PYTORCH),
}

#: every cell, by (kind, operation)
MATRIX: dict[tuple[str, str], Cell] = {
    (kind, op): cell for kind, row in ROWS.items() for op, cell in row.items()}


# ---- reading the matrix -----------------------------------------------------------------------

def holes(matrix: Mapping[tuple[str, str], Cell] = MATRIX) -> list[tuple[str, str, str]]:
    """(kind, operation, what happens) of every Hole, in table order."""
    out = []
    for kind in KINDS:
        for op in OPERATIONS:
            cell = matrix.get((kind.key, op.key))
            if isinstance(cell, Hole):
                out.append((kind.key, op.key, cell.what))
    return out


def counts(matrix: Mapping[tuple[str, str], Cell] = MATRIX) -> dict[str, int]:
    """How many cells of each sort: ``works``, ``refused``, ``holes``."""
    got = {"works": 0, "refused": 0, "holes": 0}
    for cell in matrix.values():
        got["works" if isinstance(cell, Works) else
            "refused" if isinstance(cell, Refused) else "holes"] += 1
    return got


# ---- the docs page ----------------------------------------------------------------------------

def shown(cell: Cell) -> str:
    """A cell as the docs table shows it (no links, no pipes)."""
    if isinstance(cell, Works):
        text = f"✔ {cell.note}" if cell.note else "✔"
    elif isinstance(cell, Refused):
        text = f"refused: {cell.why}"
    else:
        text = f"not yet: {cell.what}"
    return text.replace("|", "/").replace("\n", " ")


def _table(group: str, matrix: Mapping[tuple[str, str], Cell]) -> list[str]:
    ops = [op for op in OPERATIONS if op.group == group]
    lines = ["| model kind | " + " | ".join(op.name for op in ops) + " |",
             "|---|" + "---|" * len(ops)]
    for kind in KINDS:
        cells = [shown(matrix[(kind.key, op.key)]) for op in ops]
        lines.append(f"| {kind.name} | " + " | ".join(cells) + " |")
    return lines


def page(matrix: Mapping[tuple[str, str], Cell] = MATRIX) -> str:
    """docs/matrix.md, made from the tables above."""
    n = counts(matrix)
    lines = [
        "# What works for which model",
        "",
        f"<!-- generated: `{COMMAND}` writes this page from tests/matrix/table.py; "
        "do not edit it by hand -->",
        "",
        "Rows are the kinds of model a study takes; columns, what you do with a study of one. "
        "The test suite keeps this matrix and checks that each cell's tests exist.",
        "",
        "- **✔**: a test runs it end to end on a real Triton, with real MLflow and Optuna "
        "stores; a note says what the test shows beyond [the operation](#the-operations).",
        "- **refused: why**: the step cannot exist for that kind, and `tracker check` (or the "
        "step's own command) says so before anything runs.",
        "- **not yet: what happens**: neither tested nor refused yet.",
        "",
        f"Today: {n['works']} cells ✔, {n['refused']} refused, {n['holes']} not yet.",
    ]
    for group, heading in GROUPS:
        lines += ["", f"## {heading}", "", *_table(group, matrix)]
    lines += ["", "## The model kinds", ""]
    lines += [f"- **{kind.name}**: {kind.what}" for kind in KINDS]
    lines += ["", "## The operations", ""]
    lines += [f"- **{op.name}**: {op.what}" for op in OPERATIONS]
    return "\n".join(lines) + "\n"


def write(path: Path = PAGE) -> bool:
    """Write the page to ``path``; whether it changed."""
    text = page()
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


USAGE = "usage: python -m tests.matrix.table [PAGE]  (writes docs/matrix.md, or PAGE)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(USAGE, file=sys.stderr)
        return 0 if args[0] in ("-h", "--help") else 2
    path = Path(args[0]) if args else PAGE
    changed = write(path)
    n = counts()
    print(f"{path}: {'written' if changed else 'unchanged'} ({n['works']} works, "
          f"{n['refused']} refused, {n['holes']} holes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
