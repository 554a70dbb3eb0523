#!/usr/bin/env python3
"""password-load: do many concurrent argon2 binds slow down other clients' lookups?

Bounded in time and count, stops by itself. Against a running server:

1. idle: one probe connection does base-scope lookups of --lookup-dn, one at a time, at
   --probe-rate per second for --idle-s seconds; its latencies are the baseline.
2. load: --binds connections each bind as --bind-dn (whose userPassword is an {ARGON2}
   hash) over and over, closed loop, for --load-s seconds, while the probe goes on.

Reports the probe's p50/p99 in both phases, binds per second and how many were answered
busy (51), and whether the load p99 is within max(2 x idle p99, idle p99 + 5 ms), the
requirement of issue #10. Raw BER over asyncio, so that 500 connections cost the client
little CPU (the server's hash threads are what is measured).

Example (docs/BENCHMARKS.md, "Password hashing under load"):
  python3 bench/password-load.py --server 127.0.0.1:3389 --binds 500 \\
      --bind-dn uid=load,ou=people,dc=example,dc=com --bind-pw load-secret
"""

import argparse
import asyncio
import json
import statistics
import sys
import time

BINDS_MAX = 2000
PHASE_S_MAX = 120
PDU_BYTES_MAX = 1 << 20


def length(n):
    if n < 0x80:
        return bytes([n])
    octets = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(octets)]) + octets


def tlv(tag, value):
    return bytes([tag]) + length(len(value)) + value


def integer(n):
    return tlv(0x02, n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big"))


def message(message_id, op):
    return tlv(0x30, integer(message_id) + op)


def bind_request(message_id, dn, password):
    op = tlv(0x60, integer(3) + tlv(0x04, dn.encode()) + tlv(0x80, password.encode()))
    return message(message_id, op)


def base_lookup(message_id, dn):
    # SearchRequest: base scope, neverDerefAliases, no limits, (objectClass=*), ["1.1"].
    op = tlv(
        0x63,
        tlv(0x04, dn.encode())
        + tlv(0x0A, b"\x00")
        + tlv(0x0A, b"\x00")
        + integer(0)
        + integer(0)
        + tlv(0x01, b"\x00")
        + tlv(0x87, b"objectClass")
        + tlv(0x30, tlv(0x04, b"1.1")),
    )
    return message(message_id, op)


async def read_pdu(reader):
    """One whole LDAPMessage; returns (protocolOp tag, resultCode or None)."""
    head = await reader.readexactly(2)
    if head[1] & 0x80:
        count = head[1] & 0x7F
        size = int.from_bytes(await reader.readexactly(count), "big")
    else:
        size = head[1]
    if size > PDU_BYTES_MAX:
        raise ValueError("PDU too large")
    body = await reader.readexactly(size)
    # Skip the messageID (INTEGER, short form length).
    at = 2 + body[1]
    op_tag = body[at]
    at += 1
    if body[at] & 0x80:
        at += 1 + (body[at] & 0x7F)
    else:
        at += 1
    code = None
    if op_tag in (0x61, 0x65) and body[at] == 0x0A:
        code = body[at + 2]
    return op_tag, code


async def connect(host, port):
    return await asyncio.open_connection(host, port)


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def probe(host, port, dn, rate, stop_at, latencies_ms):
    reader, writer = await connect(host, port)
    message_id = 1
    interval = 1.0 / rate
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        started = time.monotonic()
        writer.write(base_lookup(message_id, dn))
        await writer.drain()
        while True:
            op_tag, code = await read_pdu(reader)
            if op_tag == 0x65:
                break
        latencies_ms.append((time.monotonic() - started) * 1000.0)
        if code != 0:
            raise RuntimeError(f"lookup of {dn} answered {code}")
        message_id += 1
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    writer.close()


async def binder(host, port, dn, password, stop_at, counts):
    reader, writer = await connect(host, port)
    message_id = 1
    while time.monotonic() < stop_at:
        writer.write(bind_request(message_id, dn, password))
        await writer.drain()
        _, code = await read_pdu(reader)
        counts[code] = counts.get(code, 0) + 1
        message_id += 1
        if code == 51:
            # Busy: back off a little, as a client would.
            await asyncio.sleep(0.01)
    writer.close()


async def run(args):
    host, port = args.server.rsplit(":", 1)
    port = int(port)
    idle = []
    await probe(host, port, args.lookup_dn, args.probe_rate, time.monotonic() + args.idle_s, idle)
    loaded = []
    counts = {}
    stop_at = time.monotonic() + args.load_s
    started = time.monotonic()
    binders = [binder(host, port, args.bind_dn, args.bind_pw, stop_at, counts) for _ in range(args.binds)]
    # The probe starts once every bind connection has had a moment to connect.
    async def delayed_probe():
        await asyncio.sleep(min(1.0, args.load_s / 4))
        await probe(host, port, args.lookup_dn, args.probe_rate, stop_at, loaded)

    await asyncio.wait_for(asyncio.gather(delayed_probe(), *binders), timeout=args.load_s + 60)
    elapsed = time.monotonic() - started
    idle_p99 = percentile(idle, 0.99)
    load_p99 = percentile(loaded, 0.99)
    bound_ms = max(2 * idle_p99, idle_p99 + 5.0)
    report = {
        "binds_concurrent": args.binds,
        "idle_lookups": len(idle),
        "idle_p50_ms": round(statistics.median(idle), 3),
        "idle_p99_ms": round(idle_p99, 3),
        "load_lookups": len(loaded),
        "load_p50_ms": round(statistics.median(loaded), 3),
        "load_p99_ms": round(load_p99, 3),
        "bound_p99_ms": round(bound_ms, 3),
        "within_bound": load_p99 <= bound_ms,
        "binds_ok": counts.get(0, 0),
        "binds_busy": counts.get(51, 0),
        "binds_other": {str(k): v for k, v in counts.items() if k not in (0, 51)},
        "binds_ok_per_s": round(counts.get(0, 0) / elapsed, 1),
    }
    print(json.dumps(report, indent=2))
    return 0 if report["within_bound"] else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="127.0.0.1:3389")
    parser.add_argument("--binds", type=int, default=500)
    parser.add_argument("--bind-dn", required=True)
    parser.add_argument("--bind-pw", required=True)
    parser.add_argument("--lookup-dn", default="uid=bob,ou=people,dc=example,dc=com")
    parser.add_argument("--probe-rate", type=float, default=200.0, help="lookups per second")
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=10.0)
    args = parser.parse_args()
    if not 1 <= args.binds <= BINDS_MAX:
        parser.error(f"--binds must be 1-{BINDS_MAX}")
    if not (0 < args.idle_s <= PHASE_S_MAX and 0 < args.load_s <= PHASE_S_MAX):
        parser.error(f"phases last at most {PHASE_S_MAX} s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
