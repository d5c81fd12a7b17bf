#!/usr/bin/env python3
"""A status-bar feed (waybar "custom" module with "return-type": "json", or polybar's
tail = true): one line per change of one countdown, each second while it runs. It follows a
daemon restart by itself.

    python3 status_bar.py pomodoro
"""
import json
import sys

from countdownd import Client


def clock(milliseconds: int) -> str:
    seconds = -(-milliseconds // 1000)
    return "%d:%02d" % divmod(seconds, 60) if seconds < 3600 else "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def main(name: str) -> None:
    client = Client()
    print(json.dumps({"text": "", "class": "idle"}), flush=True)
    for event in client.subscribe([name]):
        if event.kind in ("done", "cancelled", "removed"):
            line = {"text": "", "class": "idle"}
        elif event.kind == "paused" or event.state == "paused":
            line = {"text": "⏸ " + clock(event.remaining_ms), "class": "paused"}
        else:
            line = {"text": clock(event.remaining_ms), "class": "running"}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
