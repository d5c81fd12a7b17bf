#!/usr/bin/env python3
"""An OTP "resend code" cooldown per phone number: the code is sent once, then the button says
"Resend code in 42 s" until the cooldown ends. One request per click; no second one to learn the
time left, and no race with the cooldown ending in between.

    python3 otp_cooldown.py +4915112345678
"""
import sys

from countdownd import Busy, Client

COOLDOWN_S = 60


def request_code(client: Client, phone: str) -> int:
    """Sends a code unless one was sent less than COOLDOWN_S ago. Returns 0 if sent, else the
    seconds to wait (what an HTTP 429 would carry as Retry-After)."""
    try:
        client.start("otp:" + phone, COOLDOWN_S)
    except Busy as busy:
        return busy.retry_after_s  # Rounded up, at least 1: never "0 s" while busy.
    # ... send the SMS here ...
    return 0


if __name__ == "__main__":
    with Client() as client:
        wait = request_code(client, sys.argv[1])
        print("code sent" if wait == 0 else "Resend code in %d s" % wait)
