#!/usr/bin/env python3
"""The Python clients behind the conformance suite's driver protocol (clients/conformance/README.md).

    python3 conformance_driver.py --client blocking   # Client, shared by threads
    python3 conformance_driver.py --client async      # AsyncClient, shared by tasks

A call's `timeout_ms` is the library's own `timeout=` for the blocking client; for the asyncio
one, every other call is bounded by `asyncio.wait_for` instead (cancellation, as a handler
does), so both ways of giving up are held to the contract.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))

from countdownd import AsyncClient, Busy, Client, Countdown, CountdowndError, Event  # noqa: E402


def countdown_json(countdown: Countdown) -> Dict[str, Any]:
    described = {"name": countdown.name, "state": countdown.state, "remaining_ms": countdown.remaining_ms,
                 "total_ms": countdown.total_ms}
    if countdown.phase is not None:
        described.update(phase=countdown.phase, phases=countdown.phases, label=countdown.label, round=countdown.round)
    return described


def event_json(event: Event) -> Dict[str, Any]:
    return {"seq": event.seq, "kind": event.kind, "name": event.name, "remaining_ms": event.remaining_ms,
            "total_ms": event.total_ms}


def error_json(error: BaseException) -> Dict[str, Any]:
    if isinstance(error, CountdowndError):
        described: Dict[str, Any] = {"kind": error.code, "maybe_applied": error.maybe_applied, "message": str(error)}
        if isinstance(error, Busy):
            described["remaining_ms"] = error.remaining_ms
        return described
    if isinstance(error, (asyncio.TimeoutError, asyncio.CancelledError)):
        return {"kind": "cancelled", "message": "cancelled by asyncio.wait_for"}
    return {"kind": "not-a-countdownd-error", "message": "%s: %s" % (type(error).__name__, error)}


def seconds(command: Dict[str, Any]) -> Optional[float]:
    timeout = command.get("timeout_ms")
    return None if timeout is None else timeout / 1000


class Blocking:
    capabilities = ["requests", "timeouts", "shared", "reconnect", "wait", "subscribe", "cycles"]

    def __init__(self) -> None:
        self.client: Optional[Client] = None
        self.subscriptions: Dict[str, "queue.Queue[Any]"] = {}
        self.stops: Dict[str, threading.Event] = {}

    def call(self, command: Dict[str, Any]) -> Any:
        assert self.client is not None
        method, name, kwargs = command["method"], command.get("name"), {}
        if "timeout_ms" in command:
            kwargs["timeout"] = seconds(command)
        if method == "start":
            return self.client.start(name, command.get("duration"), replace=command.get("replace", False),
                                     cycle=command.get("cycle"), repeat=command.get("repeat"), **kwargs)
        if method == "extend":
            return self.client.extend(name, command["duration"], **kwargs)
        if method == "list":
            return self.client.list(prefix=command.get("prefix"), **kwargs)
        if method == "ping":
            self.client.ping(**kwargs)
            return None
        return getattr(self.client, method)(name, **kwargs)

    def handle(self, command: Dict[str, Any]) -> Any:
        op = command["op"]
        if op == "connect":
            self.client = Client(command["socket"], timeout=30.0)
            return None
        if op == "reset":
            for stop in self.stops.values():
                stop.set()
            self.stops.clear()
            self.subscriptions.clear()
            if self.client:
                self.client.close()
            return None
        if op == "call":
            return self.call(command)
        if op == "storm":
            calls: List[Dict[str, Any]] = command["calls"]
            results: List[Dict[str, Any]] = [{}] * len(calls)

            def one(index: int) -> None:
                try:
                    results[index] = outcome_of(self.call(calls[index]))
                except Exception as error:  # noqa: BLE001 (each failure is a result)
                    results[index] = {"error": error_json(error)}
            with ThreadPoolExecutor(max_workers=command["workers"]) as pool:
                list(pool.map(one, range(len(calls))))
            return results
        if op == "wait":
            assert self.client is not None
            return self.client.wait(command["name"], timeout=seconds(command))
        if op == "subscribe":
            assert self.client is not None
            events: "queue.Queue[Any]" = queue.Queue()
            stop = threading.Event()
            iterator = self.client.subscribe(names=command.get("names"), prefix=command.get("prefix"),
                                              kinds=command.get("kinds"), since=command.get("since"),
                                              timeout=seconds(command))

            def follow() -> None:
                try:
                    for event in iterator:
                        events.put(event)
                        if stop.is_set():
                            return
                except Exception as error:  # noqa: BLE001 (handed to next_event)
                    events.put(error)
            threading.Thread(target=follow, daemon=True).start()
            self.subscriptions[command["sub"]] = events
            self.stops[command["sub"]] = stop
            return None
        if op == "next_event":
            item = self.subscriptions[command["sub"]].get()
            if isinstance(item, BaseException):
                raise item
            return event_json(item)
        if op == "close_sub":
            self.stops.pop(command["sub"]).set()
            self.subscriptions.pop(command["sub"])
            return None
        raise ValueError("unknown op %r" % op)


class Async:
    capabilities = ["requests", "timeouts", "shared", "reconnect", "wait", "subscribe", "cycles"]

    def __init__(self) -> None:
        self.client: Optional[AsyncClient] = None
        self.subscriptions: Dict[str, Any] = {}
        self.counter = 0

    async def bounded(self, make: Any, command: Dict[str, Any]) -> Any:
        """Every other bounded call through asyncio.wait_for (cancellation), the rest through
        the library's own timeout."""
        self.counter += 1
        timeout = seconds(command)
        if "timeout_ms" in command and timeout is not None and self.counter % 2 == 0:
            return await asyncio.wait_for(make({}), timeout)
        return await make({"timeout": timeout} if "timeout_ms" in command else {})

    async def call(self, command: Dict[str, Any]) -> Any:
        client = self.client
        assert client is not None
        method, name = command["method"], command.get("name")

        def make(kwargs: Dict[str, Any]) -> Any:
            if method == "start":
                return client.start(name, command.get("duration"), replace=command.get("replace", False),
                                    cycle=command.get("cycle"), repeat=command.get("repeat"), **kwargs)
            if method == "extend":
                return client.extend(name, command["duration"], **kwargs)
            if method == "list":
                return client.list(prefix=command.get("prefix"), **kwargs)
            if method == "ping":
                return client.ping(**kwargs)
            return getattr(client, method)(name, **kwargs)
        return await self.bounded(make, command)

    async def handle(self, command: Dict[str, Any]) -> Any:
        op = command["op"]
        if op == "connect":
            self.client = await AsyncClient.connect(command["socket"], timeout=30.0)
            return None
        if op == "reset":
            for task, _ in self.subscriptions.values():
                task.cancel()
            self.subscriptions.clear()
            if self.client:
                await self.client.close()
            return None
        if op == "call":
            return await self.call(command)
        if op == "storm":
            calls: List[Dict[str, Any]] = command["calls"]
            results: List[Dict[str, Any]] = [{}] * len(calls)
            next_index = iter(range(len(calls)))

            async def worker() -> None:
                for index in next_index:
                    try:
                        results[index] = outcome_of(await self.call(calls[index]))
                    except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 (each failure is a result)
                        if isinstance(error, asyncio.CancelledError) and asyncio.current_task().cancelled():
                            raise
                        results[index] = {"error": error_json(error)}
            await asyncio.gather(*(worker() for _ in range(command["workers"])))
            return results
        if op == "wait":
            assert self.client is not None
            return await self.client.wait(command["name"], timeout=seconds(command))
        if op == "subscribe":
            assert self.client is not None
            events: "asyncio.Queue[Any]" = asyncio.Queue()
            iterator = self.client.subscribe(names=command.get("names"), prefix=command.get("prefix"),
                                             kinds=command.get("kinds"), since=command.get("since"),
                                             timeout=seconds(command))

            async def follow() -> None:
                try:
                    async for event in iterator:
                        await events.put(event)
                except Exception as error:  # noqa: BLE001 (handed to next_event)
                    await events.put(error)
            self.subscriptions[command["sub"]] = (asyncio.ensure_future(follow()), events)
            return None
        if op == "next_event":
            item = await self.subscriptions[command["sub"]][1].get()
            if isinstance(item, BaseException):
                raise item
            return event_json(item)
        if op == "close_sub":
            task, _ = self.subscriptions.pop(command["sub"])
            task.cancel()
            return None
        raise ValueError("unknown op %r" % op)


def reply(ident: Any, outcome: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(dict(outcome, id=ident)) + "\n")
    sys.stdout.flush()


def outcome_of(value: Any) -> Dict[str, Any]:
    if isinstance(value, Countdown):
        return {"ok": countdown_json(value)}
    if isinstance(value, list) and value and isinstance(value[0], Countdown):
        return {"ok": [countdown_json(c) for c in value]}
    return {"ok": value}


def run_blocking() -> None:
    driver = Blocking()
    reply(None, {"hello": "python-blocking", "capabilities": Blocking.capabilities})
    lock = threading.Lock()

    def serve(command: Dict[str, Any]) -> None:
        try:
            outcome = outcome_of(driver.handle(command))
        except Exception as error:  # noqa: BLE001 (reported to the harness)
            outcome = {"error": error_json(error)}
        with lock:
            reply(command["id"], outcome)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] in ("wait",):
            threading.Thread(target=serve, args=(command,), daemon=True).start()  # Answered later.
        else:
            serve(command)


async def run_async() -> None:
    driver = Async()
    reply(None, {"hello": "python-async", "capabilities": Async.capabilities})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)  # A storm's calls come as one line.
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def serve(command: Dict[str, Any]) -> None:
        try:
            outcome = outcome_of(await driver.handle(command))
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 (reported to the harness)
            outcome = {"error": error_json(error)}
        reply(command["id"], outcome)
    background = set()
    while True:
        line = await reader.readline()
        if not line:
            return
        command = json.loads(line)
        if command["op"] == "wait":
            task = asyncio.ensure_future(serve(command))  # Answered later.
            background.add(task)
            task.add_done_callback(background.discard)
        else:
            await serve(command)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("blocking", "async"), default="blocking")
    if parser.parse_args().client == "blocking":
        run_blocking()
    else:
        asyncio.run(run_async())


if __name__ == "__main__":
    main()
