#!/usr/bin/env python3
"""Runs a command when a countdown is done (not when it is cancelled): the library's
`cdctl wait build && notify-send done`. It waits across a daemon restart.

    python3 run_when_done.py build notify-send "build finished"
"""
import subprocess
import sys

from countdownd import Client, NotFound


def main(name: str, command: list) -> int:
    with Client() as client:
        try:
            ended = client.wait(name)
        except NotFound as error:
            print(error, file=sys.stderr)
            return 1
    if ended.state != "done":
        print("%s was %s; not running %s" % (name, ended.state, command[0]), file=sys.stderr)
        return 1
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
