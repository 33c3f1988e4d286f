"""Ray's out-of-memory message becomes one line naming the process, its size, the knob and the log
(``leakbed.ray_actors.memory_line``)."""

from __future__ import annotations

import ray.exceptions as rex

from leakbed import ray_actors
from leakbed.ray_actors import MEMORY_KNOBS, memory_line

# the shape of Ray 2.55's message (the raylet's format strings), 2,000 characters of it in a real run
RAY_OOM = (
    "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.7, ID: 3f2a) was 22.91GB / "
    "24.00GB (0.954590), which exceeds the memory usage threshold of 0.950000; Object store memory usage: [...]; Ray "
    "killed 1 worker(s) based on the killing policy: [(Worker with no lease granted: job ID=01000000, lease ID=ab, "
    "task name=ClientAppActor.run, required resources={CPU: 1}, pid=4242, actual memory used=2.13GB, worker ID=cd)]; "
    "To see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.7`; "
    + "Top 10 memory users: ... " * 40
)


def test_one_line_names_the_process_its_size_the_knob_and_the_log():
    line = memory_line(RAY_OOM, "/tmp/ray/session_x/logs")
    assert "\n" not in line and len(line) < 300, line
    assert line.startswith("Ray's memory monitor killed ClientAppActor.run (pid 4242, 2.13 GB)"), line
    assert "with the machine at 22.91 of 24.00 GB" in line and MEMORY_KNOBS in line, line
    assert line.endswith("; Ray's log: /tmp/ray/session_x/logs/raylet.out"), line


def test_other_errors_are_not_memory_lines():
    assert memory_line("ValueError: bad config") == ""
    assert memory_line("ActorDiedError: the actor died unexpectedly") == ""


def test_a_dead_actor_for_memory_is_told_in_that_line(monkeypatch):
    monkeypatch.setattr(ray_actors, "_ray_logs", lambda: "")
    said = ray_actors._actor_died(rex.OutOfMemoryError(RAY_OOM))
    assert said.startswith("Ray's memory monitor killed ClientAppActor.run (pid 4242, 2.13 GB)") and "log" not in said
    crashed = ray_actors._actor_died(rex.ActorDiedError())
    assert crashed.startswith("ActorDiedError: ") and "memory monitor" not in crashed
    assert ray_actors._actor_died(ValueError("x")) == ""
