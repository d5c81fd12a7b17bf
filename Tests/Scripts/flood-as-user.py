#!/usr/bin/env python3
"""A hostile local user for the integration tests, run under setpriv as another uid.

  flood-as-user.py connections SOCKET OUT   open connections until one is refused; write
                                            "held N <refusal>" to OUT, then hold them until killed
  flood-as-user.py countdowns SOCKET N      pipeline N STARTs on one connection (1,000 at a time); print
                                            "ok=K limit=L" and the first ERR limit line
  flood-as-user.py race N SOCKET...        one connection to each socket (cluster hosts): N STARTs
                                            pipelined on each, all sent before any reply is read,
                                            names distinct per socket; print "ok=K limit=L
                                            other=O" and the first other reply
  flood-as-user.py churn SOCKET N           START and CANCEL N countdowns (2N lifecycle
                                            events), pipelined; print "events=E"
  flood-as-user.py subscribers SOCKET N OUT [KINDS]
                                            open N connections that SUBSCRIBE to everything
                                            (of these event kinds, if given) and never read
                                            past the OK; write "subscribed N" to OUT, then
                                            hold them until killed
  flood-as-user.py churners SOCKET K N      churn N countdowns on each of K connections at
                                            once (threads); print "events=E" in all
  flood-as-user.py readers SOCKET N OUT PREFIX
                                            open N connections that SUBSCRIBE PREFIX PREFIX
                                            EVENTS lifecycle and read everything, as fast as
                                            they can; write "subscribed N" to OUT, then read
                                            until killed
  flood-as-user.py namesubscribers SOCKET N NAMES OUT
                                            start NAMES countdowns of an hour (those already
                                            running are taken as they are), then open N
                                            connections that each SUBSCRIBE to all of them by
                                            name (lines of 300 names) and never read; write
                                            "subscribed N" to OUT once every line is sent, then
                                            hold them until killed
  flood-as-user.py replaces SOCKET K N      START ... REPLACE N times over K names of its own,
                                            pipelined on one connection (each replace is a
                                            cancelled and a started event); print "ok=N"
  flood-as-user.py lists SOCKET N OUT       open N connections that send LIST and never read;
                                            write "listing N" to OUT, then hold them until killed
  flood-as-user.py say SOCKET LINE...       send the lines, then PING, on one connection; print
                                            every line received (the greeting first) up to and
                                            including "OK pong"
"""
import selectors
import socket
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    return s


def read_line(s, buffer):
    while b"\n" not in buffer[0]:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        buffer[0] += chunk
    line, buffer[0] = buffer[0].split(b"\n", 1)
    return line.decode()


def connections(path, out):
    held = []
    while True:
        s = connect(path)
        greeting = read_line(s, [b""])
        if greeting.startswith("ERR"):
            break
        held.append(s)
    with open(out, "w") as f:
        f.write("held %d %s\n" % (len(held), greeting))
    while True:
        time.sleep(3600)


def countdowns(path, count):
    s = connect(path)
    buffer = [b""]
    read_line(s, buffer)  # greeting
    ok = limit = 0
    first = ""
    # In chunks, reading the replies between them: a client that sends without reading is not
    # read once 4 MiB of replies wait for it (backpressure), and would then wait forever itself.
    for start in range(0, count, 1000):
        names = range(start, min(start + 1000, count))
        s.sendall(b"".join(b"START flood%d 1h\n" % i for i in names))
        for _ in names:
            line = read_line(s, buffer)
            if line.startswith("OK"):
                ok += 1
            elif line.startswith("ERR limit"):
                limit += 1
                first = first or line
    print("ok=%d limit=%d %s" % (ok, limit, first))


def race(count, paths):
    sockets = [connect(path) for path in paths]
    buffers = [[b""] for _ in paths]
    for s, buffer in zip(sockets, buffers):
        read_line(s, buffer)  # greeting
    for index, s in enumerate(sockets):
        s.sendall(b"".join(b"START h%d-%d 1h\n" % (index, i) for i in range(count)))
    ok = limit = other = 0
    first = ""
    for s, buffer in zip(sockets, buffers):
        for _ in range(count):
            line = read_line(s, buffer)
            if line.startswith("OK"):
                ok += 1
            elif line.startswith("ERR limit"):
                limit += 1
            else:
                other += 1
                first = first or line
    print("ok=%d limit=%d other=%d %s" % (ok, limit, other, first))


def churners(path, connections, count):
    import threading
    totals = []

    def one(index):
        totals.append(churn(path, count, "c%d-" % index, quiet=True))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("events=%d" % sum(totals))


def churn(path, count, tag="", quiet=False):
    s = connect(path)
    buffer = [b""]
    read_line(s, buffer)  # greeting
    events = 0
    for start in range(0, count, 1000):
        names = range(start, min(start + 1000, count))
        s.sendall(b"".join(b"START churn%s%d 1h\nCANCEL churn%s%d\n" % (tag.encode(), i, tag.encode(), i) for i in names))
        for _ in range(2 * len(names)):
            if read_line(s, buffer).startswith("OK"):
                events += 1
        s.sendall(b"".join(b"REMOVE churn%s%d\n" % (tag.encode(), i) for i in names))
        for _ in names:
            if read_line(s, buffer).startswith("OK"):
                events += 1
    if not quiet:
        print("events=%d" % events)
    return events


def subscribers(path, count, out, kinds=None):
    held = []
    request = b"SUBSCRIBE EVENTS %s\n" % kinds.encode() if kinds else b"SUBSCRIBE\n"
    for _ in range(count):
        s = connect(path)
        buffer = [b""]
        read_line(s, buffer)  # greeting
        s.sendall(request)
        reply = read_line(s, buffer)
        if not reply.startswith("OK"):
            raise SystemExit("SUBSCRIBE refused: " + reply)
        held.append(s)
    with open(out, "w") as f:
        f.write("subscribed %d\n" % len(held))
    while True:
        time.sleep(3600)


def readers(path, count, out, prefix):
    selector = selectors.DefaultSelector()
    for _ in range(count):
        s = connect(path)
        buffer = [b""]
        read_line(s, buffer)  # greeting
        s.sendall(b"SUBSCRIBE PREFIX %s EVENTS lifecycle\n" % prefix.encode())
        reply = read_line(s, buffer)
        if not reply.startswith("OK"):
            raise SystemExit("SUBSCRIBE refused: " + reply)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
    with open(out, "w") as f:
        f.write("subscribed %d\n" % count)
    while True:
        for key, _ in selector.select():
            try:
                if not key.fileobj.recv(1 << 20):
                    selector.unregister(key.fileobj)
            except BlockingIOError:
                pass


def namesubscribers(path, count, names, out):
    s = connect(path)
    buffer = [b""]
    read_line(s, buffer)  # greeting
    for start in range(0, names, 1000):
        chunk = range(start, min(start + 1000, names))
        s.sendall(b"".join(b"START named%d 1h\n" % i for i in chunk))
        for _ in chunk:
            reply = read_line(s, buffer)
            if not reply.startswith("OK") and not reply.startswith("ERR busy"):
                raise SystemExit("START refused: " + reply)
    lines = b"".join(
        b"SUBSCRIBE " + b" ".join(b"named%d" % i for i in range(start, min(start + 300, names))) + b"\n"
        for start in range(0, names, 300)
    )
    held = []
    for _ in range(count):
        c = connect(path)
        c.setblocking(False)
        held.append((c, lines))
    # Everything sent, never read: a socket the daemon does not read fast enough is written
    # to as it takes more.
    pending = [(c, memoryview(data)) for c, data in held]
    while pending:
        rest = []
        for c, data in pending:
            try:
                sent = c.send(data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                rest.append((c, data[sent:]))
        pending = rest
        if pending:
            time.sleep(0.01)
    with open(out, "w") as f:
        f.write("subscribed %d\n" % count)
    while True:
        time.sleep(3600)


def replaces(path, names, count):
    s = connect(path)
    buffer = [b""]
    read_line(s, buffer)  # greeting
    ok = 0
    for start in range(0, count, 1000):
        chunk = range(start, min(start + 1000, count))
        s.sendall(b"".join(b"START replaced%d 1h REPLACE\n" % (i % names) for i in chunk))
        for _ in chunk:
            if read_line(s, buffer).startswith("OK"):
                ok += 1
    print("ok=%d" % ok)


def lists(path, count, out):
    held = []
    for _ in range(count):
        s = connect(path)
        s.sendall(b"LIST\n")
        held.append(s)
    with open(out, "w") as f:
        f.write("listing %d\n" % count)
    while True:
        time.sleep(3600)


def say(path, lines):
    s = connect(path)
    buffer = [b""]
    print(read_line(s, buffer))
    s.sendall("".join(line + "\n" for line in lines + ["PING"]).encode())
    while True:
        line = read_line(s, buffer)
        print(line)
        if line == "OK pong":
            break


if __name__ == "__main__":
    if sys.argv[1] == "connections":
        connections(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "subscribers":
        subscribers(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    elif sys.argv[1] == "readers":
        readers(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif sys.argv[1] == "churners":
        churners(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "race":
        race(int(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "namesubscribers":
        namesubscribers(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "replaces":
        replaces(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "lists":
        lists(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "say":
        say(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "churn":
        churn(sys.argv[2], int(sys.argv[3]))
    else:
        countdowns(sys.argv[2], int(sys.argv[3]))
