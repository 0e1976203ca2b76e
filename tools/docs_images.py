"""The docs site's pictures (`make docs-images`), drawn by the project itself from one real tiny sweep.

The docs show what a user gets, so the pictures are not mock-ups: a 2 x 2 group-size x learning-rate
sweep of the embedded tiny model runs with ``logger=trackio`` in a temporary folder (a couple of
minutes on a laptop CPU). Its sweep report's reward curves and heatmap are copied as they are drawn,
and trackio's dashboard of its runs (``python -m grpo_exp.dashboard <sweep> --local``) is
photographed in the headless Chromium that tests/test_trackio.py drives. Rerun it after changing the
report's plots or the dashboard, and commit the PNGs.

Each picture is kept under ``MAX_BYTES`` (the repository keeps every version of every picture, and
tests/test_readme.py checks it): a screenshot is reduced to a palette first, then scaled down if it
must be.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images"
MAX_BYTES = 300_000
# Learning rates either side of the tiny model's default (1e-3), long enough for the curves to part.
SWEEP = ("grpo.num_generations=4,8", "optimizer.lr=3e-4,3e-3", "grpo.max_steps=24")
SWEEP_TIMEOUT_S = 1800
# Debian's Chromium, as tests/test_trackio.py uses it (Playwright's own download needs a reachable host).
CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 900}
DASHBOARD_WAIT_S = 60
SETTLE_S = 2.0  # the plots animate in after their SVG appears


def run_sweep(work: Path) -> tuple[Path, dict[str, str]]:
    """The sweep's folder and the environment that finds its trackio store (W&B stays out of it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    env |= {"TRACKIO_DIR": str(work / "store"), "PYTHONPATH": str(ROOT)}
    sweep = work / "sweep"
    command = [sys.executable, "run.py", "-m", f"hydra.sweep.dir={sweep}", "logger=trackio", *SWEEP]
    print("sweep:", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"the sweep failed:\n{done.stderr[-3000:]}")
    return sweep, env


def report_pictures(sweep: Path) -> dict[str, Path]:
    """The report's reward curves and objective heatmap, under the names the docs use."""
    report = sweep / "report"
    heatmaps = sorted(report.glob("*_heatmap.png"))
    if not (report / "reward_curves.png").is_file() or len(heatmaps) != 1:
        sys.exit(f"the sweep report in {report} lacks reward_curves.png or one *_heatmap.png")
    return {"sweep_reward_curves.png": report / "reward_curves.png", "sweep_heatmap.png": heatmaps[0]}


def dashboard_screenshot(sweep: Path, env: dict[str, str], out: Path) -> Path:
    """trackio's dashboard of the sweep's runs, their reward curves overlaid, as the browser shows it."""
    from playwright.sync_api import expect, sync_playwright

    command = [sys.executable, "-m", "grpo_exp.dashboard", str(sweep), "--local"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline() if server.stdout else ""
        if not first.startswith("trackio dashboard: http://"):
            sys.exit(f"the dashboard did not start: {first}{server.stderr.read() if server.stderr else ''}")
        url = first.split(": ", 1)[1].strip()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{url}&metric_filter=train/reward", timeout=DASHBOARD_WAIT_S * 1000)
            plot = page.locator("div", has=page.get_by_text("reward", exact=True)).filter(has=page.locator("svg path"))
            expect(plot.first).to_be_visible(timeout=DASHBOARD_WAIT_S * 1000)
            time.sleep(SETTLE_S)
            page.screenshot(path=str(out))
            browser.close()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    return out


def fit(picture: Path, palette: bool = False, limit: int = MAX_BYTES) -> int:
    """Shrink the PNG in place until it is under ``limit`` bytes: a 256-colour palette, then smaller sizes.

    ``palette`` reduces it to the palette even when it fits: a screenshot's size varies with what the
    page showed, and one just under the limit would fail it on the next run.
    """
    if picture.stat().st_size < limit and not palette:
        return picture.stat().st_size
    image = Image.open(picture).convert("RGB")
    scale = 1.0
    while True:
        size = (round(image.width * scale), round(image.height * scale))
        resized = image if scale == 1.0 else image.resize(size, Image.Resampling.LANCZOS)
        resized.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(picture, optimize=True)
        if picture.stat().st_size < limit:
            return picture.stat().st_size
        scale *= 0.85


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the PNGs go (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args()
    if not CHROMIUM.is_file():
        sys.exit(f"no Chromium at {CHROMIUM}: `make browser-tools` installs it (root and apt)")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="docs-images-") as work:
        sweep, env = run_sweep(Path(work))
        written = {
            Path(shutil.copyfile(source, args.out / name)): False for name, source in report_pictures(sweep).items()
        }
        written[dashboard_screenshot(sweep, env, args.out / "trackio_dashboard.png")] = True
    for picture, screenshot in written.items():
        shown = picture.relative_to(ROOT) if picture.is_relative_to(ROOT) else picture
        print(f"{shown}: {fit(picture, palette=screenshot)} bytes")
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
