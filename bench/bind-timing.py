#!/usr/bin/python3
"""bind-timing: do an unknown DN, a wrong password (stored in the server's scheme or in
{SSHA}, or under a lockout policy that records each failure) and an entry without
userPassword take as long to refuse? (docs/BENCHMARKS.md, "Bind timing"; the e2e test
checks only that each does the same work.)

Against a running server with the example data (`ferrodir serve`): adds uid=bind-timing,
uid=bind-timing-ssha and uid=bind-timing-policy under ou=people as the admin (passwords
stored with the server's scheme, hash on write, or given as {SSHA}; the last governed by
cn=bind-timing-policy, pwdLockout TRUE with a pwdMaxFailure never reached, so that each
failure writes pwdFailureTime), then binds wrongly as the five
kinds, interleaved so that a slow moment hits each
alike, one connection per kind, --samples binds each per round. Prints each round's
median per kind and the spread (max - min) / min; exits 1 if no round's spread is under
--spread-max (20%). Deletes the entry again.

  /usr/bin/python3 bench/bind-timing.py --server 127.0.0.1:3389 [--samples 30] [--rounds 5]
"""

import argparse
import base64
import hashlib
import os
import statistics
import sys
import time

import ldap3

BASE = "dc=example,dc=com"
USER = "uid=bind-timing,ou=people," + BASE
CHEAP = "uid=bind-timing-ssha,ou=people," + BASE
GOVERNED = "uid=bind-timing-policy,ou=people," + BASE
POLICY = "cn=bind-timing-policy," + BASE


def connect(server):
    return ldap3.Connection(ldap3.Server(server), user="cn=x", password="x",
                            authentication=ldap3.SIMPLE, raise_exceptions=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:3389")
    parser.add_argument("--admin-dn", default="cn=admin," + BASE)
    parser.add_argument("--admin-pw", default="secret")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--spread-max", type=float, default=0.20)
    args = parser.parse_args()

    admin = ldap3.Connection(ldap3.Server(args.server), args.admin_dn, args.admin_pw,
                             raise_exceptions=False)
    if not admin.bind():
        sys.exit(f"bind-timing: cannot bind as {args.admin_dn}: {admin.result}")
    for dn in (USER, CHEAP, GOVERNED, POLICY):
        admin.delete(dn)
    if not admin.add(USER, ["inetOrgPerson"],
                     {"cn": "bind timing", "sn": "timing", "userPassword": "bind-timing-secret"}):
        sys.exit(f"bind-timing: cannot add {USER}: {admin.result}")
    # An {SSHA} value, as an import from slapd brings: stored as given (hash on write keeps
    # values already hashed), never bound with its right password here (no upgrade).
    salt = os.urandom(4)
    ssha = "{SSHA}" + base64.b64encode(hashlib.sha1(b"bind-timing-secret" + salt).digest() + salt).decode()
    if not admin.add(CHEAP, ["inetOrgPerson"], {"cn": "bind timing ssha", "sn": "timing", "userPassword": ssha}):
        sys.exit(f"bind-timing: cannot add {CHEAP}: {admin.result}")
    if not admin.add(POLICY, ["organizationalRole", "pwdPolicy"],
                     {"cn": "bind-timing-policy", "pwdAttribute": "userPassword", "pwdLockout": "TRUE",
                      "pwdMaxFailure": "1000000"}):
        sys.exit(f"bind-timing: cannot add {POLICY}: {admin.result}")
    if not admin.add(GOVERNED, ["inetOrgPerson"],
                     {"cn": "bind timing policy", "sn": "timing", "userPassword": "bind-timing-secret",
                      "pwdPolicySubentry": POLICY}):
        sys.exit(f"bind-timing: cannot add {GOVERNED}: {admin.result}")
    kinds = [
        ("unknown DN", "uid=nobody,ou=people," + BASE),
        ("wrong password", USER),
        ("no userPassword", "cn=staff,ou=groups," + BASE),
        ("wrong password, {SSHA}", CHEAP),
        ("wrong password, lockout policy", GOVERNED),
    ]
    conns = [connect(args.server) for _ in kinds]
    for conn in conns:
        conn.open()
    best = None
    try:
        for round_ in range(1, args.rounds + 1):
            samples = [[] for _ in kinds]
            for _ in range(args.samples):
                for index, (kind, dn) in enumerate(kinds):
                    conn = conns[index]
                    conn.user, conn.password = dn, "not-the-password"
                    started = time.perf_counter()
                    ok = conn.bind()
                    samples[index].append(time.perf_counter() - started)
                    if ok or conn.result.get("result") != 49:
                        sys.exit(f"bind-timing: {kind}: expected invalidCredentials, got {conn.result}")
            medians = [statistics.median(s) * 1e6 for s in samples]
            spread = (max(medians) - min(medians)) / min(medians)
            print(f"round {round_}: " + ", ".join(
                f"{kind} {m:.0f} us" for (kind, _), m in zip(kinds, medians)) + f"; spread {spread:.1%}")
            best = spread if best is None else min(best, spread)
    finally:
        for dn in (USER, CHEAP, GOVERNED, POLICY):
            admin.delete(dn)
    if best is None or best >= args.spread_max:
        print(f"FAIL: the medians differ by {best:.1%} or more in every round")
        sys.exit(1)
    print(f"ok: best round's spread {best:.1%} (< {args.spread_max:.0%})")


if __name__ == "__main__":
    main()
