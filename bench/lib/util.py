#!/usr/bin/env python3
"""Small parsers for the benchmark scripts, so that the bash stays about orchestration.

  util.py ldclt FILE [CODES]    -> "ops_per_s=.. ops_total=.. errors=.. ignored=.. dead_threads=.."
                                   CODES: the result codes passed to ldclt -I, comma-separated
  util.py strace FILE           -> "fsync=.. fdatasync=.. sync_file_range=.. msync=.."
  util.py cpu PID               -> "utime_ticks stime_ticks" of the whole process
  util.py json k=v [k=v ...]    -> one JSON object (numbers stay numbers)
  util.py latency FILE          -> the last JSON line of FILE, or {} if none
  util.py idle PID MAX_S        -> waits until the process uses under 5% of a CPU (0.5-s
                                   windows) or MAX_S pass; prints the seconds waited
  util.py stoplog FILE          -> p50/p99/max of stop_latency_us per reason from the
                                   server's ferrodir::search_stop debug lines, as JSON
  util.py undeb DEB DIR         -> unpacks a .deb's files into DIR as `dpkg -x` would
                                   (for a machine without dpkg; gz, bz2 and xz data)
"""
import json
import os
import re
import sys
import time


def ldclt(path, ignored_codes=""):
    """Reads ldclt's summary. A run is only a result when ldclt saw no error: anything else
    (an error count, dead threads before the samples ended) is reported so the caller can
    call the scenario broken instead of printing a number. Errors ldclt was told to ignore
    (-I, e.g. noSuchObject on deletes) are not errors; ldclt counts only successful
    operations in its total and rate (unless -e counteach), so those stay as they are."""
    text = open(path, errors="replace").read()
    ignore = {int(c) for c in ignored_codes.split(",") if c.strip()}
    rate = total = 0.0
    m = re.findall(r"Global average rate:\s*[0-9.]+/thr\s*\(\s*([0-9.]+)/sec\),\s*total:\s*(\d+)", text)
    if m:
        rate, total = float(m[-1][0]), int(m[-1][1])
    counted = re.findall(r"Global error (\d+) \(.*?\) occurs\s+(\d+) times", text)
    ignored = sum(int(times) for code, times in counted if int(code) in ignore)
    unexpected = [f"error {code} x {times}" for code, times in counted if int(code) not in ignore]
    no_error = "Global no error occurs during this session" in text or (counted and not unexpected)
    error_lines = unexpected + [l for l in text.splitlines()
                                if re.search(r"Cannot|failed|Exit status [1-9]", l)]
    dead = re.search(r"Global number of dead threads:\s*(\d+)", text)
    exit_ok = "Exit status 0" in text
    errors = 0 if (no_error and exit_ok and m and not error_lines) else max(1, len(error_lines))
    print(f"ops_per_s={round(rate, 1)} ops_total={int(total)} errors={errors} ignored={ignored} "
          f"dead_threads={int(dead.group(1)) if dead else 0}")
    if errors:
        sys.stderr.write("\n".join(error_lines[:5]) + "\n")


def strace(path):
    """strace -c summary: 'calls' is the 4th column (errors column may be empty)."""
    counts = {"fsync": 0, "fdatasync": 0, "sync_file_range": 0, "msync": 0}
    for line in open(path, errors="replace"):
        parts = line.split()
        if parts and parts[-1] in counts and len(parts) >= 5:
            counts[parts[-1]] = int(parts[3])
    print(" ".join(f"{k}={v}" for k, v in counts.items()))


def cpu(pid):
    """utime and stime (fields 14 and 15) in clock ticks; the comm field may hold spaces,
    so split after its closing parenthesis."""
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    print(fields[11], fields[12])


def to_value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def emit_json(pairs):
    obj = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        obj[key] = to_value(value)
    print(json.dumps(obj))


def latency(path):
    last = "{}"
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                last = line
    try:
        print(json.dumps(json.loads(last)))
    except json.JSONDecodeError:
        print("{}")


def cpu_ticks(pid):
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def idle(pid, max_s):
    """After a load phase: a server may still be working on what the clients left behind
    (scans nobody waits for any more). Waiting here keeps that work out of the next phase,
    which may measure another server on the same CPU; the wait itself is reported."""
    tick, window, start = os.sysconf("SC_CLK_TCK"), 0.5, time.monotonic()
    try:
        before = cpu_ticks(pid)
        while time.monotonic() - start < float(max_s):
            time.sleep(window)
            after = cpu_ticks(pid)
            if (after - before) / tick < 0.05 * window:
                break
            before = after
    except (OSError, ValueError):
        pass  # the process is gone: nothing to wait for
    print(round(time.monotonic() - start, 1))


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def nearest_rank(sorted_values, q):
    """The smallest value with at least q of the values at or below it."""
    import math
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def stop_line(line):
    """(reason, shard, stop_latency_us) of one ferrodir::search_stop line, text or JSON
    format, or None. Field order, quoting and ANSI colours do not matter."""
    line = ANSI.sub("", line).strip()
    if "search_stop" not in line or "stop_latency_us" not in line:
        return None
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return None
        fields = record.get("fields", record)
        try:
            return (str(fields.get("reason", "?")).strip('"'), fields.get("shard"),
                    int(float(fields["stop_latency_us"])))
        except (KeyError, TypeError, ValueError):
            return None
    latency = re.search(r"\bstop_latency_us=\"?([0-9]+(?:\.[0-9]+)?)", line)
    if not latency:
        return None
    reason = re.search(r'\breason=(?:"([^"]*)"|(\S+))', line)
    shard = re.search(r"\bshard=\"?([0-9]+)", line)
    return ((reason.group(1) if reason and reason.group(1) is not None else reason.group(2)) if reason else "?",
            int(shard.group(1)) if shard else None, int(float(latency.group(1))))


def stoplog(path):
    by_reason = {}
    lines = 0
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            parsed = stop_line(line)
            if parsed:
                lines += 1
                by_reason.setdefault(parsed[0], []).append(parsed[2])

    def stats(values):
        values = sorted(values)
        return {"n": len(values), "p50_us": nearest_rank(values, 0.5), "p99_us": nearest_rank(values, 0.99),
                "max_us": values[-1]}

    if not lines:
        print(json.dumps({"lines": 0, "note": "no stop lines found"}))
        return
    every = [v for values in by_reason.values() for v in values]
    print(json.dumps({"lines": lines, "all": stats(every),
                      "by_reason": {reason: stats(values) for reason, values in sorted(by_reason.items())}}))


def undeb(deb, dest):
    """A .deb is an ar archive holding debian-binary, control.tar.* and data.tar.*; the
    files are in data.tar.*. Python's tarfile reads gz, bz2 and xz (Debian's default), not
    zstd: such a package needs dpkg, and this says so instead of unpacking half."""
    import io
    import tarfile
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            sys.exit(f"{deb}: not a .deb (ar) file")
        while True:
            header = f.read(60)
            if len(header) < 60:
                sys.exit(f"{deb}: no data.tar member")
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode())
            body = f.read(size)
            if size % 2:
                f.read(1)
            if name.startswith("data.tar"):
                if name.endswith(".zst"):
                    sys.exit(f"{deb}: zstd-compressed data: unpack it with dpkg -x")
                with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                    if hasattr(tarfile, "data_filter"):
                        tar.extractall(dest, filter="tar")
                    else:
                        tar.extractall(dest)
                return


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "ldclt":
        ldclt(args[0], args[1] if len(args) > 1 else "")
    elif command == "strace":
        strace(args[0])
    elif command == "cpu":
        cpu(args[0])
    elif command == "json":
        emit_json(args)
    elif command == "latency":
        latency(args[0])
    elif command == "idle":
        idle(args[0], args[1] if len(args) > 1 else 60)
    elif command == "stoplog":
        stoplog(args[0])
    elif command == "undeb":
        undeb(args[0], args[1])
    else:
        sys.exit(f"unknown command {command}")


main()
