#!/usr/bin/env python3
"""Small parsers for the benchmark scripts, so that the bash stays about orchestration.

  util.py ldclt FILE [CODES]    -> "ops_per_s=.. ops_total=.. errors=.. ignored=.. dead_threads=.."
                                   CODES: the result codes passed to ldclt -I, comma-separated
  util.py strace FILE           -> "fsync=.. fdatasync=.. sync_file_range=.. msync=.."
  util.py cpu PID               -> "utime_ticks stime_ticks" of the whole process
  util.py json k=v [k=v ...]    -> one JSON object (numbers stay numbers)
  util.py latency FILE          -> the last JSON line of FILE, or {} if none
"""
import json
import os
import re
import sys


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
    else:
        sys.exit(f"unknown command {command}")


main()
