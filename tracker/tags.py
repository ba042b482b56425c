"""Every MLflow tag name the tracker writes (``tracker.*``, plus the ``mlflow.*`` ones it sets).

A bottom-layer module (imports nothing from the package): the tuning loop (tuning/trial.py,
conclusion/finish.py), tracking/ (runs, registry, scale-out), deploy/ (promotion, watcher) and the
report all name tags from here, so a reader finds what a tag means in one place.
"""

from __future__ import annotations

# ---- MLflow's own ---------------------------------------------------------------------------
PARENT = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
NOTE = "mlflow.note.content"            # the run's description: a summary or why it failed
# MLflow's own tags that say what ran (commit, repository, entry point, user): a launcher's
# run under `mlflow run` hands them to the study's run (tracking/mlflow_run.py)
PROVENANCE = ("mlflow.source.", "mlflow.project.", "mlflow.gitRepoURL", "mlflow.user")

# ---- every run (tracking/runs.py) ---------------------------------------------------------
ROLE = "tracker.role"                   # study | trial | profile | worker | confirm | launcher
STUDY = "tracker.study"                 # the Optuna study name
STORAGE = "tracker.storage"             # the Optuna storage URL, password hidden
TRIAL = "tracker.trial"                 # the Optuna trial number
STATE = "tracker.state"                 # the Optuna state the run ended with
SUPERSEDED_BY = "tracker.superseded_by"  # an adopted child: the parent run that took it over

# ---- a trial's child run (trial.py) ---------------------------------------------------------
FEASIBLE = "tracker.feasible"           # true | false: every constraint holds
BASELINE = "tracker.baseline"           # true on the default configuration's trial
DEFAULT_UNSET = "tracker.default_unset"  # knobs the default config leaves unset
DUPLICATE_OF = "tracker.duplicate_of"   # the trial whose result was reused
CONCURRENCY = "tracker.concurrency"     # the level the trial is judged by
STABLE = "tracker.stable"               # false: no level of the trial met the stability rule
SWEEP_STOP = "tracker.sweep_stop"       # why the sweep ended
MODEL_ERROR = "tracker.model_error"     # logging the MLflow model failed (the trial counts)
FAIL_REASON = "tracker.fail_reason"     # why the trial failed
CHECK = "tracker.check"  # a trial: why its outputs were not checked; the parent: what is
# compared (probes, outputs, tolerances, the outputs ignored)
# the output check's reference (outputs/trials.py): the run holding check/reference.npz
# and the tolerances as JSON {rtol, atol, ignore}; a study attribute, then a version's tags
CHECK_REFERENCE = "tracker.check_reference_run"
CHECK_TOLERANCE = "tracker.check_tolerance"
# a configuration of several models (a pipeline, several models on one server)
MODELS = "tracker.models"               # JSON list of every model, load order (entry last)
ENTRY_MODEL = "tracker.entry_model"     # the entry model (the one the load drives)
SERVER_FLAGS = "tracker.server_flags"   # the tritonserver flags of server.options it ran with
SERVER_RESTART = "tracker.server_restart"  # why the server was restarted for it (options)
# a configuration remembered from an earlier study (search.warm_start): "<run id>/trial-<n>",
# the earlier trial run it repeats; its figures here are measured here
WARM_START = "tracker.warm_start"

# ---- the study's parent run (conclude.py) ---------------------------------------------------
SUMMARY = "tracker.summary"             # the study's result in one sentence
STOP_REASON = "tracker.stop_reason"     # why the study stopped
BEST_RUN = "tracker.best_run_id"        # the best trial's child run
BEST_TRIAL = "tracker.best_trial"       # the best trial's number
BEST_PARAM_PREFIX = "best."             # best.<knob>: the best trial's params
# search.warm_start (invocation/remembered.py): the earlier study's parent run id, and what was
# reused from it in words (configurations queued, knobs dropped, other hardware)
WARM_START_FROM = "tracker.warm_start_from"
WARM_START_NOTE = "tracker.warm_start_note"
# what the study's model is, for a later study's warm start: JSON {backend, models, inputs}
MODEL_SIGNATURE = "tracker.model_signature"

# ---- scale-out (tracking/scaleout.py) -------------------------------------------------------
DEAD_WORKER = "tracker.dead_worker"     # a trial run failed because its worker died
STUDY_RUN_ID = "tracker.study_run_id"   # a worker's own run (or confirm's): the parent
LAUNCHER = "tracker.launcher_run_id"    # `mlflow run`'s own run, elsewhere (tracking/mlflow_run.py)

# ---- the model registry (tracking/registry.py, deploy/) -------------------------------------
MODEL_FLAVOR = "tracker.flavor"
MODEL_RUN_ID = "tracker.run_id"         # a version: the trial run it was registered from
MODEL_CONSTRAINT = "tracker.constraint"  # a version: tracker.constraint.<metric>
MODEL_CHOSEN_BY = "tracker.chosen_by"  # a version: verdict, search or hand (--trial N)
MODEL_FILES = "tracker.model_files"    # a trial run: runs:/<parent>/study_model (stored once)
MODEL_SHA256 = "tracker.model_sha256"  # a trial run: the stored model file's digest
# a logged model and the version registered from it: the sha256 of its files as deployed
# (tracking/flavor.py artifact_digest); a deployment refuses a download that differs
ARTIFACT_SHA256 = "tracker.artifact_sha256"
# a trial run of a configuration of several models (a pipeline): every model in load order
# (composing first, entry last) as a JSON list, and the entry model; absent for one model
MODELS = "tracker.models"
ENTRY_MODEL = "tracker.entry_model"
DEPLOY_STATUS = "tracker.deploy.status"  # serving | replaced | failed | removed
DEPLOY_MESSAGE = "tracker.deploy.message"
DEPLOY_TARGET = "tracker.deploy.target"
DEPLOY_AT = "tracker.deploy.at"
DEPLOY_REFUSED = "tracker.deploy.refused"  # a version deploy refused: answers unlike the study's
DEPLOY_NAME = "tracker.deploy.name"     # the deployment a registered model is served as
WATCH_SEEN = "tracker.watch.seen"       # a registered model: the versions a watcher handled

# ---- the machine a measurement was made on (measure/host.py) ---------------------------
HOST_CPU = "tracker.host.cpu"                # CPU model name
HOST_CPU_CORES = "tracker.host.cpu_cores"    # physical cores
HOST_CPU_THREADS = "tracker.host.cpu_threads"  # logical CPUs
HOST_MEMORY = "tracker.host.memory_gb"       # total RAM, GB
HOST_OS = "tracker.host.os"
HOST_PYTHON = "tracker.host.python"
HOST_MIXED = "tracker.host.mixed"            # parent run: workers on different machines
LAUNCH_MODE = "tracker.host.launch_mode"     # local | docker | remote (server.mode)
VERSION = "tracker.host.version."            # + package name, e.g. tracker.host.version.mlflow
TRITON_VERSION = VERSION + "triton_server"   # the server's own (server metadata)
GPU_COUNT = "tracker.gpu.count"
GPU_UUIDS = "tracker.gpu.uuids"              # comma-separated, the server's order
GPU_NAMES = "tracker.gpu.names"              # comma-separated, one per GPU
GPU_DEVICE = "tracker.gpu.device."           # + UUID: name, memory, NVML index, PCI, MIG parent
GPU_DRIVER = "tracker.gpu.driver"            # NVIDIA driver version (NVML)
GPU_CUDA = "tracker.gpu.cuda"                # the CUDA version the driver supports (NVML)
GPU_SOURCE = "tracker.gpu.source"            # where the server's GPU set came from
GPU_MEMORY_SCOPE = "tracker.gpu.memory_scope"  # processes | device | processes+device

# ---- the confirmation round (tracker/confirm/) -------------------------------------------
VERDICT = "tracker.verdict"             # parent: better | tied | equivalent | inconclusive
                                        # (no_better: written before equivalent/inconclusive)
CONFIRMED_TRIAL = "tracker.confirmed_trial"  # parent: the trial the confirmation chose
CONFIRM_TIED = "tracker.confirm_tied"   # parent: the configurations tied with it
CONFIRM_STOP = "tracker.confirm_stop"   # parent: why the rounds stopped
CONFIRM_SWINGS = "tracker.confirm_swings"  # parent: a configuration whose readings swing far
                                           # more than the others' ("" when none does)
CONFIRM_DESIGN = "tracker.confirm_design"  # parent: paired | rounds (tracker/confirm/paired.py)
CONFIRM_DESIGN_REASON = "tracker.confirm_design_reason"  # parent: why, in words
CONFIRM_PAIR_RATIOS = "tracker.confirm_pair_ratios"  # parent: the best / default, per pair
CONFIRM_RANK = "tracker.confirm_rank"   # a confirmed trial's run: its rank
CONFIRM_ROLE = "tracker.confirm_role"   # a confirmed trial's run: default, chosen, tied, ...
