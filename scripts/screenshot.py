"""Regenerate the README's screenshot of the run page from a real recorded run.

Runs the README caption's command (`COMMAND`, on the deterministic fake model, so it runs on
any machine and the picture does not depend on a model's output) through the real command
line into a temporary ledger, writes the run's page with ``clearance view``, opens it in
headless Chromium, selects `SELECTED` through the page's own selection (the address
fragment ``#task-N``) and saves the page, from its top, as ``docs/img/run-view.png``.

    python scripts/screenshot.py                 # or: make screenshot
    python scripts/screenshot.py --output shot.png --keep DIR

Needs selenium (the ``dev`` extra), Chromium and its driver (Debian: ``chromium`` and
``chromium-driver``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMAND = ("clearance", "run", "examples/code_review.yaml", "--model", "fake:review")
"""The command the README's caption names; the script runs exactly this (ledger aside)."""

SELECTED = "review-decoder"
"""The task selected in the picture (the caption names it)."""

OUTPUT = ROOT / "docs" / "img" / "run-view.png"
VIEWPORT = (1400, 1200)
"""Width and height of the page's viewport, in CSS pixels at scale 1: the picture's size."""


def clearance(*args: str, db: str) -> str:
    """Run ``clearance ARGS`` with this interpreter from the repository root; its output.

    The ledger is ``db`` (through ``CLEARANCE_DB``, so the command is the caption's as is).

    Raises:
        RuntimeError: The command failed (its output is in the message).
    """
    env = dict(os.environ, CLEARANCE_DB=db, COLUMNS="100")
    done = subprocess.run(
        [sys.executable, "-m", "clearance", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"clearance {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def record_run(folder: Path) -> tuple[str, str, Path]:
    """Run `COMMAND` into a ledger in ``folder`` and write its page.

    Returns:
        ``(ledger URL, run id, the page's path)``.
    """
    db = f"sqlite:///{folder / 'runs.db'}"
    output = clearance(*COMMAND[1:], db=db)
    found = re.search(r"run id: (\S+)", output)
    if found is None:
        raise RuntimeError(f"no run id in the output of {' '.join(COMMAND)}:\n{output}")
    run_id = found.group(1)
    page = folder / "run.html"
    clearance("view", run_id, "--output", str(page), db=db)
    return db, run_id, page


def task_fragment(db: str, run_id: str, task_id: str) -> str:
    """The page's address fragment that selects ``task_id`` (``#task-N``).

    Raises:
        RuntimeError: The run has no such task.
    """
    from clearance import RunLedger
    from clearance.view import load_run_view

    with RunLedger(db) as ledger:
        view = load_run_view(ledger, run_id)
    for task in view.tasks:
        if task.task_id == task_id:
            return f"#task-{task.index}"
    raise RuntimeError(f"run {run_id} has no task {task_id!r}")


def screenshot(page: Path, fragment: str, output: Path) -> None:
    """Open ``page`` at ``fragment`` in headless Chromium and save it, from the top, as PNG."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        raise RuntimeError("headless Chromium is not installed (chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", "--hide-scrollbars", "--no-first-run",
        "--disable-background-networking", "--force-device-scale-factor=1",
    ):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.set_page_load_timeout(30)
        width, height = VIEWPORT  # the viewport itself, whatever the window's frame takes
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(page.as_uri() + fragment)
        WebDriverWait(driver, 15).until(
            lambda d: d.execute_script("return document.body.dataset.ready") == "true"
        )
        driver.execute_script("window.scrollTo(0, 0)")
        output.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(output)):
            raise RuntimeError(f"Chromium could not write {output}")
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    """Record the run, render its page, save the picture; prints what it wrote."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="PNG to write.")
    parser.add_argument("--keep", type=Path, help="Keep the ledger and page in this folder.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clearance-screenshot-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        db, run_id, page = record_run(folder.resolve())
        screenshot(page, task_fragment(db, run_id, SELECTED), args.output)
    print(f"wrote {args.output} (run {run_id}, task {SELECTED}: {' '.join(COMMAND)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
