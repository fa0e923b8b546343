"""Nothing leaks: exit paths of an owner process, kill -9 plus prune, the reaper, the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from typer.testing import CliRunner

from agentgym.cli.containers import app as containers_app
from agentgym.containers import Sandbox, docker_client, reap

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

# Every container is made off the main thread (pool workers, a thread), as in a rollout worker.
# SIGINT gets Python's default handler: a process started in the background by a
# non-interactive shell (as CI runners may do) inherits SIGINT ignored, and would never exit.
OWNER = """
import signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from agentgym.containers import Sandbox, SandboxPool
boxes = []
makers = [threading.Thread(target=lambda: boxes.append(Sandbox("sandbox"))) for _ in range(2)]
for maker in makers:
    maker.start()
for maker in makers:
    maker.join()
pool = SandboxPool("sandbox", size=2, reap=False).start()
pool.wait_ready(120)
print("ready", flush=True)
how = sys.argv[1]
if how == "raise":
    raise RuntimeError("boom")
if how == "exit":
    sys.exit(0)
time.sleep(600)
"""


def _containers(run: str, stopped: bool = True) -> list[dict]:
    return docker_client().api.containers(all=stopped, filters={"label": f"agentgym.run={run}"})


def _start_owner(how: str) -> tuple[subprocess.Popen[str], str]:
    run = f"test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "AGENTGYM_RUN_ID": run}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, how], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    assert line == "ready\n", owner.stderr.read() if owner.stderr else line
    assert len(_containers(run)) == 4
    return owner, run


def _wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def test_kill_9_of_the_owner_then_prune_leaves_zero_containers(sandbox_image: str) -> None:
    owner, run = _start_owner("sleep")
    owner.kill()
    owner.wait(timeout=30)
    # The attach sockets died with the owner: each guest read EOF and its container stopped.
    # Stopped containers stay until a reaper removes them (this prune, or any pool starting).
    assert _wait_for(lambda: not _containers(run, stopped=False), 30)
    result = CliRunner().invoke(containers_app, ["prune"])
    assert result.exit_code == 0, result.output
    assert "removed" in result.output
    assert _containers(run) == []


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_normal_exit_and_exceptions_remove_everything(sandbox_image: str, how: str) -> None:
    owner, run = _start_owner(how)
    owner.wait(timeout=120)
    assert _containers(run) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_remove_everything(sandbox_image: str, signum: int) -> None:
    owner, run = _start_owner("sleep")
    owner.send_signal(signum)
    code = owner.wait(timeout=120)
    assert code != 0
    assert _containers(run) == []


def test_reaper_keeps_containers_of_live_owners(sandbox: Sandbox) -> None:
    report = reap()
    assert sandbox.short_id not in report.removed_containers
    assert sandbox.exec("echo alive").stdout == "alive\n"


def test_labels_name_the_owner(sandbox: Sandbox) -> None:
    labels = docker_client().api.inspect_container(sandbox.id)["Config"]["Labels"]
    assert labels["agentgym.managed"] == "1" and labels["agentgym.kind"] == "sandbox"
    assert labels["agentgym.owner.pid"] == str(os.getpid())
    assert labels["agentgym.session"] == sandbox.session and labels["agentgym.image"] == "sandbox"
    assert {"agentgym.owner.host", "agentgym.owner.boot", "agentgym.owner.start", "agentgym.run"} <= set(labels)
