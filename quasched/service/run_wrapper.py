"""``python -m quasched.service.run_wrapper EXIT_FILE -- ARGV...``: run a job's command and record its
exit status in ``EXIT_FILE``, so the service can read it even when it is not the wrapper's parent
(it restarted and re-attached). The status is the child's exit code, or ``-N`` when signal ``N``
ended it; the file is written whole (a temporary file renamed). The wrapper is the leader of the
job's session and process group: the service signals the group; SIGTERM reaches the child there,
and the wrapper outlives it to record how it ended (SIGKILL ends both, and then no status is
recorded). When the child has ended and its status is written, the wrapper kills what is left
of the group (processes the command started and left behind), itself last: nothing of a job runs
on its devices after it ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def write_status(path: str, status: int) -> None:
    """Write ``status`` to ``path`` atomically."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as out:
        out.write(f"{status}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m quasched.service.run_wrapper EXIT_FILE -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))  # the child, in the same group, gets it too
    try:
        child = subprocess.Popen(command, restore_signals=True)
    except OSError as err:
        print(f"quasched: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        write_status(exit_file, 127)
        return 127
    if stopping:  # asked to stop while the child was being started: it may have missed the signal
        child.send_signal(signal.SIGTERM)
    while True:
        try:
            status = child.wait()
            break
        except InterruptedError:  # pragma: no cover - wait retries by itself since PEP 475
            continue
    write_status(exit_file, status)
    os.killpg(0, signal.SIGKILL)  # the leftovers of the job, and the wrapper
    return status  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
