#!/usr/bin/env python3
"""Times the three ways a durable commit can reach the disk, on the filesystem of the
current directory (docs/DECISIONS.md, "A write log in front of redb"):

- one 4 KiB page overwritten in a preallocated file, then fdatasync (the write log);
- 4 KiB appended to a growing file, then fdatasync (a log whose size changes each time);
- 13 scattered 4 KiB pages written in a 60 MB file, then fdatasync (a redb modify commit).

    python3 bench/fsync-patterns.py [--n 1000]

Prints wall and CPU microseconds per operation; removes its files."""
import argparse
import os
import random
import time


def run(name, fn, n):
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        fn(i)
    wall = (time.perf_counter() - wall) / n * 1e6
    cpu = (time.process_time() - cpu) / n * 1e6
    print(f"{name}: {wall:.0f} us wall, {cpu:.0f} us cpu per op")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    n = parser.parse_args().n
    page = os.urandom(4096)
    files = ["fsync-pre.log", "fsync-app.log", "fsync-big.db"]
    try:
        pre = os.open(files[0], os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.write(pre, b"\0" * (8 << 20))
        os.fsync(pre)
        run("preallocated 4 KiB overwrite + fdatasync", lambda i: (os.pwrite(pre, page, (i % 2048) * 4096), os.fdatasync(pre)), n)
        app = os.open(files[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        run("4 KiB append + fdatasync", lambda i: (os.write(app, page), os.fdatasync(app)), n)
        big = os.open(files[2], os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.write(big, os.urandom(60 << 20))
        os.fsync(big)

        def scattered(_):
            for _ in range(13):
                os.pwrite(big, page, random.randrange(15360) * 4096)
            os.fdatasync(big)

        run("13 scattered pages + fdatasync", scattered, n)
    finally:
        for f in files:
            if os.path.exists(f):
                os.remove(f)


if __name__ == "__main__":
    main()
