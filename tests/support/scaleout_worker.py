"""A minimal worker for tests/search/test_scaleout_storage.py: the tuner's ask/tell loop without
Triton (the "measurement" is a sleep), so the storage rules can be tested with real processes.

    python tests/support/scaleout_worker.py URL STUDY N_TRIALS SLEEP_S [HEARTBEAT_S GRACE_S]

Prints one line per event (`asked N {params}`, `measured N`, `reused N from M`,
`stale N of WORKER`, `done`).
"""

from __future__ import annotations

import sys
import time

import optuna

from tracker.search.storage import make_storage, worker_identity
from tracker.search.workers import ask_within_budget, heartbeat, wait_for_duplicate


def main(argv: list[str]) -> None:
    url, name, n_trials, sleep_s = argv[0], argv[1], int(argv[2]), float(argv[3])
    interval = int(argv[4]) if len(argv) > 4 else 1
    grace = int(argv[5]) if len(argv) > 5 else 3
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def on_stale(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        print(f"stale {trial.number} of {trial.user_attrs.get('worker')}", flush=True)

    storage = make_storage(url, heartbeat_interval=interval, grace_period=grace,
                           on_stale=on_stale)
    study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True,
                                sampler=optuna.samplers.RandomSampler())
    me = worker_identity()
    while True:
        trial = ask_within_budget(study, storage, n_trials, poll_s=0.2)
        if trial is None:
            break
        with heartbeat(storage, trial):
            x = trial.suggest_int("x", 0, 3)
            trial.set_user_attr("worker", me.id)
            print(f"asked {trial.number} {trial.params}", flush=True)
            dup = wait_for_duplicate(study, trial.number, trial.params, poll_s=0.2)
            if dup is not None:
                print(f"reused {trial.number} from {dup.number}", flush=True)
                value = dup.value
            else:
                time.sleep(sleep_s)
                value = float(x)
                print(f"measured {trial.number}", flush=True)
        study.tell(trial, value)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
