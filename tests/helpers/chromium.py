"""Debian's chromium as the browser tests drive it, through Playwright (from ``apt-get install chromium``, never
``playwright install``), and where their screenshots go."""

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}  # the laptop screen
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
