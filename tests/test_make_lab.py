"""`make lab` as a student runs it: the server starts (also as root) and serves the whole course."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from course_lib.dist import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_make_lab_serves_labs_exercises_and_solutions():
    port, token = free_port(), "course-test-token"
    args = f"--no-browser --port={port} --IdentityProvider.token={token} --ServerApp.port_retries=0"
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        listing, deadline = None, time.monotonic() + 120
        while listing is None and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"make lab exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}",
                                            timeout=5) as r:
                    listing = json.load(r)
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not answer within 120 s"
        names = {item["name"] for item in listing["content"]}
        assert {"notebooks", "exercises", "solutions"} <= names
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # make already exited: keep the assertion above as the report
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
