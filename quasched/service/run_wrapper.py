"""``python -m quasched.service.run_wrapper [--uid N --gid N --groups G1,G2,...] [--env-file FILE] EXIT_FILE --
ARGV...``: run a job's command and record its
exit status in ``EXIT_FILE``, so the service can read it even when it is not the wrapper's parent
(it restarted and re-attached). The status is the child's exit code, or ``-N`` when signal ``N``
ended it; the file is written whole (a temporary file renamed). The wrapper is the leader of the
job's session and process group: the service signals the group; SIGTERM reaches the child there,
and the wrapper outlives it to record how it ended (SIGKILL ends both, and then no status is
recorded). When the child has ended and its status is written, the wrapper kills what is left
of the group (processes the command started and left behind), itself last: nothing of a job runs
on its devices after it ended.

The child runs as ``--uid``/``--gid`` with the supplementary ``--groups`` (umask 077), in the environment of
``--env-file`` (a JSON object, removed once read; without it, the wrapper's): the wrapper, started by the
service as root with a clean environment, never runs with the job's variables (``LD_PRELOAD`` and the like)."""

from __future__ import annotations

import argparse
import json
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
    parser = argparse.ArgumentParser(prog="python -m quasched.service.run_wrapper",
                                     usage="%(prog)s [OPTIONS] EXIT_FILE -- PROGRAM [ARGS...]")
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--groups", type=lambda text: [int(g) for g in text.split(",") if g], default=None)
    parser.add_argument("--env-file")
    parser.add_argument("exit_file")
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        parser.error("no command after --")
    exit_file, env = args.exit_file, None
    if args.env_file:
        with open(args.env_file) as f:
            env = json.load(f)
        os.unlink(args.env_file)
    user = {} if args.uid is None else {"user": args.uid, "group": args.gid, "extra_groups": args.groups or [],
                                        "umask": 0o077}
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))  # the child, in the same group, gets it too
    try:
        child = subprocess.Popen(command, restore_signals=True, env=env, **user)
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
