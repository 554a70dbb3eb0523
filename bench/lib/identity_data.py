#!/usr/bin/env python3
"""The identity benchmark's data (bench/identity.sh), from gen-data.py's LDIF on stdin:

  - every user's userPassword becomes an {SSHA} value (salted SHA-1, as slappasswd -h
    {SSHA} writes it) of `password` followed by the user's number zero-padded to the
    width of its uid (password00042 for uid=user00042): ldclt's randombinddn fills the X's
    of -D and -w with the same digits, so that each bind names a user and offers that
    user's password. The salt is derived from the number, so the file is the same on
    every run and both servers load the same values;
  - with --policy DN: ou=policies and the pwdPolicy entry DN (on an organizationalRole,
    as slapd users write them) after the suffix's entries: pwdAttribute userPassword,
    pwdLockout TRUE, pwdMaxFailure 1000000 (nobody locks during the run).

Usage: identity_data.py [--policy DN] < gen-data.ldif > identity.ldif
"""
import base64
import hashlib
import re
import sys

PEOPLE_USER = re.compile(r"^dn: uid=user(\d+),ou=people,")


def ssha(password: bytes, salt: bytes) -> str:
    digest = hashlib.sha1(password + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def policy_entries(dn: str) -> str:
    rdn, _, parent = dn.partition(",")
    ou_rdn, _, suffix = parent.partition(",")
    return (f"dn: {parent}\nobjectClass: top\nobjectClass: organizationalUnit\n"
            f"ou: {ou_rdn.split('=', 1)[1]}\n\n"
            f"dn: {dn}\nobjectClass: top\nobjectClass: organizationalRole\n"
            f"objectClass: pwdPolicy\ncn: {rdn.split('=', 1)[1]}\n"
            "pwdAttribute: userPassword\npwdLockout: TRUE\npwdMaxFailure: 1000000\n\n")


def main():
    args = sys.argv[1:]
    policy = None
    if args[:1] == ["--policy"] and len(args) == 2:
        policy = args[1]
    elif args:
        sys.exit(__doc__)
    out = sys.stdout
    written_policy = policy is None
    for block in sys.stdin.read().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        m = PEOPLE_USER.match(lines[0])
        if m and not written_policy:
            # After the suffix and the two ous, before the first user.
            out.write(policy_entries(policy))
            written_policy = True
        if m:
            digits = m.group(1)
            number = int(digits)
            password = f"password{digits}".encode()
            salt = hashlib.sha1(f"identity-bench-salt-{number}".encode()).digest()[:8]
            lines = [f"userPassword: {ssha(password, salt)}" if l.startswith("userPassword:") else l
                     for l in lines]
        out.write("\n".join(lines) + "\n\n")
    if not written_policy:
        out.write(policy_entries(policy))


main()
