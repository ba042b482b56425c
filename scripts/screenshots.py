"""Take the documentation's screenshots in headless Chromium, from real studies.

    .venv/bin/python scripts/screenshots.py [--workdir DIR] [--out docs]

1. Runs two studies of projects/quickstart with ``tracker tune`` in DIR (default
   ``.tracker/screenshots``; a study already there is reused): ``quickstart`` as the project
   has it, and ``pareto``, the same with a second objective (``perf_latency_p99: minimize``)
   and 8 trials.
2. Opens each study's report.html (the parent run's artifact) and the quickstart study's
   MLflow view (the link ``tracker tune`` prints, on an ``mlflow server`` this script starts)
   in Debian's ``chromium`` (scripts/system-deps.sh installs it), driven through the DevTools
   protocol over a pipe (``--remote-debugging-pipe``), at a CSS width a docs page shows
   without shrinking the text much, 1.5 device pixels per CSS pixel.
3. Writes PNGs cropped to the part each page shows: docs/mlflow-study.png (the quickstart
   study's runs table), docs/results-tradeoff.png and docs/results-parallel.png (the
   ``pareto`` study's plots as report.html shows them), all used by docs/results.md.

Chromium and the MLflow server run in their own process groups and are killed at the end,
also when a step fails.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCALE = 1.5          # device pixels per CSS pixel: 800 CSS px make a 1200 px image
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")


# ---- the studies -------------------------------------------------------------------------

def run_study(workdir: Path, name: str, two_objectives: bool) -> Path:
    """projects/quickstart tuned in ``workdir/name`` (reused when its tune.out is there)."""
    folder = workdir / name
    out = folder / "tune.out"
    if out.exists() and "MLflow parent run" in out.read_text():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(ROOT / "projects" / "quickstart", folder,
                    ignore=shutil.ignore_patterns("*.onnx", "*.db", "mlruns"))
    spec_path = folder / "study.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    if two_objectives:
        spec["objectives"]["perf_latency_p99"] = "minimize"
        spec["search"]["n_trials"] = 8
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    print(f"tuning {name} in {folder} ...", flush=True)
    with open(out, "w") as log:
        subprocess.run([str(BIN / "tracker"), "tune", "study.yaml", "--no-bar"], cwd=folder,
                       env=env, stdout=log, stderr=subprocess.DEVNULL, check=True)
    return folder


def report_of(folder: Path) -> Path:
    """The report.html of the study's last parent run (the one tune.out names)."""
    run = re.findall(r"MLflow parent run ([0-9a-f]{32})", (folder / "tune.out").read_text())[-1]
    found = list((folder / "mlruns").glob(f"*/{run}/artifacts/report.html"))
    if not found:
        raise SystemExit(f"no report.html for parent run {run} under {folder / 'mlruns'}")
    return found[0]


# ---- Chromium through the DevTools protocol ---------------------------------------------

class Browser:
    """Headless Chromium on a DevTools pipe: fd 3 carries commands to it, fd 4 its answers,
    each message JSON ended by a NUL byte."""

    def __init__(self, profile: Path) -> None:
        exe = shutil.which("chromium")
        if exe is None:
            raise SystemExit("Debian's chromium is not installed (scripts/system-deps.sh)")
        to_child, self._to = os.pipe()
        self._from, from_child = os.pipe()
        high = [fcntl_dup(fd) for fd in (to_child, from_child)]

        def wire() -> None:
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=(3, 4), preexec_fn=wire,
                                     start_new_session=True)
        for fd in (to_child, from_child, *high):
            os.close(fd)
        self._buffer = b""
        self._id = 0
        self.session = ""

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float = 60) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answer = self._next()
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))
        raise TimeoutError(f"{method}: no answer in {timeout_s:.0f} s")

    def _next(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(raw))

    def open(self, url: str, width: int, height: int) -> None:
        """A new tab ``width`` CSS pixels wide showing ``url``, loaded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": SCALE, "mobile": False})
        self.call("Page.navigate", {"url": url})
        self.wait_for("location.href !== 'about:blank' && document.readyState === 'complete'")

    def js(self, expression: str) -> Any:
        got = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return got.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.js(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page never had {expression}")
            time.sleep(0.5)

    def shoot(self, box: dict[str, float], out: Path) -> Path:
        """A PNG of ``box`` (CSS pixels: x, y, width, height) of the page."""
        clip = {**{k: float(box[k]) for k in ("x", "y", "width", "height")}, "scale": 1.0}
        data = self.call("Page.captureScreenshot", {
            "format": "png", "clip": clip, "captureBeyondViewport": True})["data"]
        out.write_bytes(base64.b64decode(data))
        print(f"wrote {out} ({int(clip['width'] * SCALE)} px wide)", flush=True)
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._to)
        with contextlib.suppress(OSError):
            os.close(self._from)
        stop_group(self.proc)


def fcntl_dup(fd: int) -> int:
    """``fd`` copied to a number above 10, so that wiring 3 and 4 cannot overwrite it."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


def stop_group(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# ---- the shots -----------------------------------------------------------------------------

BOX_OF = """(() => { const r = %s.getBoundingClientRect();
  return {x: r.x + scrollX - 8, y: r.y + scrollY - 8, width: r.width + 16,
          height: r.height + 16}; })()"""


def report_shots(browser: Browser, report: Path, shots: dict[str, str], out: Path) -> None:
    """Each ``{file: plot}``: the report's figure of that plot, as the browser shows it."""
    browser.open(report.as_uri(), width=800, height=900)
    browser.wait_for("[...document.images].every(i => i.complete)")
    for name, plot in shots.items():
        browser.shoot(browser.js(BOX_OF % f"document.querySelector('img[alt=\"{plot}\"]')"),
                      out / name)


CLICK = """(() => { const b = [...document.querySelectorAll('button')].find(
  e => e.getAttribute('aria-label') === %s); if (b) b.click(); return !!b; })()"""
#: the grid scrolled so that its first scrolled column is the p99 latency: the pinned run name
#: and start time, then p99, throughput and the knobs
SCROLL_TO = """(() => { const left = c => document.querySelector(`.ag-header-cell[col-id="${c}"]`)
    .getBoundingClientRect().x;
  const shift = left('metrics.`perf_latency_p99`') - left('duration');
  for (const v of document.querySelectorAll('.ag-center-cols-viewport, '
                                            + '.ag-body-horizontal-scroll-viewport')) {
    v.scrollLeft = shift; v.dispatchEvent(new Event('scroll')); }
  return shift; })()"""


def mlflow_shot(browser: Browser, link: str, out: Path, columns: int = 5) -> None:
    """The runs table the printed link opens, a row per trial: the assistant panel, the side
    bar and the shared-view banner closed, the grid scrolled to p99 latency, throughput and the
    knobs, cropped to ``columns`` of them beside the run names."""
    browser.open(link, width=1100, height=700)
    browser.wait_for("document.querySelectorAll('[row-index]').length > 2")
    time.sleep(2)  # the grid sizes its columns after the rows arrive
    for label in ("Close", "Toggle sidebar", "Hide banner"):
        browser.js(CLICK % json.dumps(label))
    time.sleep(1)
    browser.js(SCROLL_TO)
    time.sleep(1)
    grid = browser.js(BOX_OF % "document.querySelector('.ag-root-wrapper')")
    center = browser.js(BOX_OF % "document.querySelector('.ag-center-cols-viewport')")
    rows = browser.js(BOX_OF % "[...document.querySelectorAll('.ag-center-cols-container "
                      "[row-index]')].pop()")
    width = center["x"] + 8 - grid["x"] + 100 * columns
    browser.shoot({"x": grid["x"], "y": grid["y"], "width": width,
                   "height": rows["y"] + rows["height"] - grid["y"]}, out)


@contextlib.contextmanager
def mlflow_server(db: Path) -> Iterator[str]:
    """``mlflow server`` over the study's sqlite store on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1", "--backend-store-uri",
                             f"sqlite:///{db}"], cwd=db.parent, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health",
                                                                       timeout=2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("mlflow server did not start")
            time.sleep(0.5)
        yield url
    finally:
        stop_group(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / ".tracker" / "screenshots")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    work: Path = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    one = run_study(work, "quickstart", two_objectives=False)
    two = run_study(work, "pareto", two_objectives=True)
    browser = Browser(work / "chromium-profile")
    try:
        report_shots(browser, report_of(two), {"results-tradeoff.png": "tradeoff",
                                               "results-parallel.png": "parallel"}, args.out)
        link = re.findall(r"and open (http://127\.0\.0\.1:5000/\S+)",
                          (one / "tune.out").read_text())[-1]
        with mlflow_server(one / "mlflow.db") as url:
            mlflow_shot(browser, link.replace("http://127.0.0.1:5000", url),
                        args.out / "mlflow-study.png")
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
