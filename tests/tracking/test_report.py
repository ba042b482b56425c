"""The study report: summary sentence, trials.csv, PNG and HTML plots (offline)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tracker.measure.types import Measurement, SweepLevel
from tracker.metrics import WEIGHTED_GAIN
from tracker.search.objective import Scoring, pick_best_level
from tracker.tracking.entry_names import entry_names
from tracker.tracking.report import ReportText, best_row, shown, summary, trials_csv, write_report
from tracker.trial_record import TrialRow
from tracker.triton.configuration import Configuration

MAX = {"perf_throughput": "maximize"}
P99 = {"perf_latency_p99": {"max": 10.0}}
#: the one entry model of ROWS, its figures named as a one-entry study names them
ONE = entry_names(["densenet"], Configuration((), ("densenet",)).metric_name)


def row(n: int, thr: float | None, p99: float = 5.0, *, feasible: bool = True,
        baseline: bool = False, count: int = 1, levels: int = 3, **kw: object) -> TrialRow:
    complete = thr is not None
    return TrialRow(
        number=n, state="COMPLETE" if complete else "FAIL",
        params={"instance_group.count": count, "instance_group.kind": "KIND_CPU"},
        values=[thr] if thr is not None else None,
        metrics={"perf_throughput": thr, "perf_latency_p99": p99} if thr is not None else {},
        feasible=feasible if complete else None, baseline=baseline, measurements=levels,
        **kw)  # type: ignore[arg-type]


ROWS = [row(0, 168.0, baseline=True), row(1, 250.0, count=2), row(2, 400.0, 30.0,
        feasible=False, count=4), row(3, 323.0, 8.0, count=3),
        row(4, 323.0, 8.0, count=3, levels=0, duplicate_of=3),
        row(5, None, count=9, levels=0, fail_reason="Triton refused the config")]


def test_summary_sentence_names_the_best_feasible_trial_and_the_gain() -> None:
    assert summary(ROWS, MAX) == (
        "In 12 measurements across 4 configurations, trial-3 gives 323.0 infer/s, "
        "92% better than the default configuration (168.0 infer/s).")
    assert best_row(ROWS, MAX) is ROWS[3]  # not the infeasible 400, not the duplicate


def test_summary_when_nothing_is_feasible_or_the_default_wins() -> None:
    none_ok = [row(0, 100.0, feasible=False, baseline=True)]
    assert summary(none_ok, MAX).endswith("no configuration met the constraints.")
    default_best = [row(0, 300.0, baseline=True), row(1, 200.0)]
    assert "the default configuration is the best one found" in summary(default_best, MAX)
    latency = {"perf_latency_p99": "minimize"}
    rows = [row(0, 1.0, 10.0, baseline=True), row(1, 1.0, 5.0)]
    for r in rows:
        r.values = [r.metrics["perf_latency_p99"]]
    assert "trial-1 gives 5.00 ms, 50% better than the default configuration (10.00 ms)" \
        in summary(rows, latency)


def test_trials_csv_has_a_line_per_trial_with_params_and_metrics() -> None:
    table = list(csv.DictReader(io.StringIO(trials_csv(ROWS, MAX))))
    assert [r["trial"] for r in table] == ["0", "1", "2", "3", "4", "5"]
    assert table[3]["instance_group.count"] == "3"
    assert table[3]["value_perf_throughput"] == "323.0"
    assert table[2]["feasible"] == "false" and table[5]["state"] == "FAIL"
    assert table[4]["duplicate_of"] == "3"
    assert "refused" in table[5]["fail_reason"]


def test_report_files_png_and_html_without_network(tmp_path: Path) -> None:
    files = write_report(ROWS, MAX, P99, tmp_path, entries=ONE, words=ReportText("densenet"))
    for name in ("history", "tradeoff", "parallel"):
        png = files[f"plots/{name}.png"].read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
        page = files[f"plots/{name}.html"].read_text()
        assert "cdn.plot.ly" in page and "Plotly.newPlot" in page
    report = files["report.html"].read_text()
    assert "data:image/png;base64," in report and "92% better" in report
    assert files["trials.csv"].read_text().startswith("trial,state,feasible")


def test_no_plots_before_the_first_complete_trial(tmp_path: Path) -> None:
    files = write_report([row(0, None, levels=0, fail_reason="x")], MAX, {}, tmp_path,
                         entries=ONE)
    assert set(files) == {"trials.csv", "report.html"}


def test_both_plots_mark_the_confirmed_medians_with_their_intervals(tmp_path: Path) -> None:
    rows = [row(0, 168.0, baseline=True, confirmed=(170.0, 160.0, 181.0), confirmed_p99=6.5),
            row(1, 250.0, count=2), row(3, 323.0, 8.0, count=3,
                                        confirmed=(301.0, 290.5, 312.0), confirmed_p99=8.25)]
    files = write_report(rows, MAX, P99, tmp_path, entries=ONE)
    for name in ("history", "tradeoff"):
        page = files[f"plots/{name}.html"].read_text()
        assert "confirmed median, 95% CI" in page, name
        assert "290.5" in page or "10.5" in page, name      # the interval reached the plot
    tradeoff = files["plots/tradeoff.html"].read_text()
    assert "8.25" in tradeoff                                 # at the confirmed p99
    plain = write_report([row(0, 168.0, baseline=True), row(1, 250.0)], MAX, P99,
                         tmp_path / "plain", entries=ONE)
    assert "confirmed median" not in plain["plots/tradeoff.html"].read_text()
    latency = {"perf_latency_p99": "minimize"}   # `confirmed` then holds p99, not throughput
    other = write_report(rows, latency, {}, tmp_path / "latency", entries=ONE)
    assert "confirmed median" not in other["plots/tradeoff.html"].read_text()


def test_the_report_says_the_confirmed_outcome_with_figures_rounded(tmp_path: Path) -> None:
    """After a confirmation the report carries the sentence the parent run's note carries (not
    the search's "92% better"), the plots' titles carry the verdict, an unbounded interval is
    drawn without its open side, and the trials table reads as a person reads it."""
    rows = [row(0, 20.279010845156158, baseline=True,
                confirmed=(15.3, 0.0, float("inf")), confirmed_p99=306.17),
            row(3, 31.891234, 8.0, count=3, confirmed=(21.16, 20.28, 23.01),
                confirmed_p99=295.3)]
    said = "In 11 measurements across 2 configurations, inconclusive after 3 interleaved rounds"
    files = write_report(rows, MAX, P99, tmp_path, entries=ONE, words=ReportText(
        text=said, caption="confirmed: inconclusive after 3 rounds, default kept"))
    report = files["report.html"].read_text()
    assert said in report and "better than the default" not in report
    assert "20.279010845156158" not in report and "<td>20.28</td>" in report
    assert "<td>31.89</td>" in report
    assert "confirmed perf_throughput (95% CI)" in report
    assert "21.16 (20.28 to 23.01)" in report and "15.30 (0.000 to unbounded)" in report
    for name in ("history", "tradeoff"):
        page = files[f"plots/{name}.html"].read_text()
        assert "confirmed: inconclusive after 3 rounds, default kept" in page, name
    assert shown("3") == "3" and shown("306.17") == "306.2" and shown("0.01234") == "0.012"
    assert shown("trial-3") == "trial-3" and shown("inf") == "unbounded"


# ---- several entry models: rows as the study writes them -----------------------------------

def _measured(conf: Configuration, n: int, levels: dict[str, tuple[int, float, float]],
              objectives: dict[str, str], reference: dict[str, float] | None = None,
              ) -> TrialRow:
    """Trial ``n`` as the study records it: each entry's Measurement (concurrency, infer/s,
    p99 ms) at one level, the level chosen and named by the study's own code (pick_best_level
    with ``conf.metric_name``); its headline metrics are the row's."""
    level = SweepLevel({entry: Measurement(concurrency=c, throughput=thr, latency_p99_ms=p99)
                        for entry, (c, thr, p99) in levels.items()})
    choice = pick_best_level([level], {}, objectives,
                             Scoring(conf.entries, conf.metric_name, reference=reference))
    return TrialRow(number=n, state="COMPLETE", params={"b/max_batch_size": n + 1},
                    values=choice.values, metrics={**choice.metrics},
                    feasible=choice.feasible, baseline=reference is None,
                    concurrency=choice.concurrency, measurements=1)


def _study(conf: Configuration, objectives: dict[str, str]) -> list[TrialRow]:
    base = _measured(conf, 0, {"a": (2, 40.0, 5.0), "b": (8, 300.0, 9.0)}, objectives)
    best = _measured(conf, 1, {"a": (2, 52.0, 6.0), "b": (4, 310.0, 7.0)}, objectives,
                     base.metrics)
    return [base, best]


TWO = Configuration((), ("a", "b"))
GAIN = {WEIGHTED_GAIN: "maximize"}


def test_trials_csv_has_each_entry_models_throughput_latency_and_level() -> None:
    entries = entry_names(TWO.entries, TWO.metric_name)
    head = trials_csv(_study(TWO, GAIN), GAIN, entries).splitlines()[0].split(",")
    each = [f"{m}/{f}" for m in ("a", "b")
            for f in ("perf_throughput", "perf_latency_p99", "concurrency")]
    assert [h for h in head if h in each] == each  # entry by entry, in this order
    assert "concurrency" not in head  # not the entries' levels summed into one column
    table = list(csv.DictReader(io.StringIO(trials_csv(_study(TWO, GAIN), GAIN, entries))))
    assert [r["a/concurrency"] for r in table] == ["2.0", "2.0"]
    assert [r["b/concurrency"] for r in table] == ["8.0", "4.0"]
    one = Configuration((), ("a",))
    head = trials_csv(_study(one, MAX), MAX, entry_names(one.entries, one.metric_name))
    # one entry is the one-entry case: the same columns, bare, each once
    assert head.splitlines()[0].split(",").count("concurrency") == 1


def test_the_summary_names_each_entry_models_throughput_and_level() -> None:
    entries = entry_names(TWO.entries, TWO.metric_name)
    text = summary(_study(TWO, GAIN), GAIN, entries)
    assert "trial-1 gives weighted_gain +0." in text
    assert "the default configuration (weighted_gain +0.000)" in text
    assert "; a 52.00 infer/s at concurrency 2 (the default: 40.00 infer/s)" in text
    assert "; b 310.0 infer/s at concurrency 4 (the default: 300.0 infer/s)." in text


def test_the_report_of_several_entry_models_has_a_trace_and_a_column_per_entry(
        tmp_path: Path) -> None:
    entries = entry_names(TWO.entries, TWO.metric_name)
    constraints = {"a/perf_latency_p99": {"max": 5.5}}
    files = write_report(_study(TWO, GAIN), GAIN, constraints, tmp_path, entries=entries)
    page = files["plots/tradeoff.html"].read_text()
    for entry in ("a", "b"):
        assert f'"name":"{entry}: feasible"' in page
        assert f'"legendgroup":"{entry}"' in page
    assert "a: p99 limit 5.5 ms" in page
    assert files["plots/tradeoff.png"].read_bytes()[:4] == b"\x89PNG"
    report = files["report.html"].read_text()
    for column in ("a/perf_throughput", "a/concurrency", "b/perf_latency_p99", "b/concurrency"):
        assert f"<th>{column}</th>" in report
