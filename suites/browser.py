"""A real headless browser for the page tests: Chromium's DOM after the page's scripts and images
have loaded. Absent Chromium, ``BROWSER`` is None and those tests skip, saying how to enable them."""

import pathlib
import shutil
import subprocess

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
NO_BROWSER = "no Chromium here; `apt-get install chromium` to check the page in a real browser"


def dump_dom(page: pathlib.Path) -> str:
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                           "--allow-file-access-from-files", "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True,
                          timeout=120).stdout
