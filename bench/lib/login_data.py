#!/usr/bin/env python3
"""The login-storm benchmark's data (bench/login-storm.sh), from gen-data.py's LDIF on stdin.

  - every user's userPassword becomes `password` followed by the user's number zero-padded
    to the width of its uid (password00042 for uid=user00042), stored as an {SSHA} value
    (salted SHA-1, as slappasswd -h {SSHA} writes it; the salt derived from the number, so
    the file is the same on every run), or, for user i < the number of lines of --hashes
    FILE, as line i of FILE (a hash of that same password in another scheme, made by
    `ferrodir hash-password`);
  - more groups, so that a login's group searches find something for every user:
    cn=dept-NNNN (N/100 of them, user i in dept i mod N/100) and cn=role-N (ten, user i in
    role i mod 10), groupOfNames under ou=groups, besides gen-data.py's group00000...
    (ten users each, the first N/10 users). No nesting: memberOf and the member search
    count the same groups;
  - the service account the searches bind as: --service-dn DN (an organizationalRole and
    simpleSecurityObject) with the {SSHA} of --service-password;
  - with --memberof, memberOf on every user, as slapd's memberof overlay would have
    written it (slapadd bypasses overlays; ferrodir computes memberOf and refuses it in an
    import, so its copy is made without the flag).

Usage: login_data.py --service-dn DN --service-password PW [--hashes FILE] [--memberof]
       < gen-data.ldif > login.ldif
"""
import argparse
import base64
import hashlib
import re
import sys
from collections import defaultdict

USER = re.compile(r"^dn: uid=user(\d+),ou=people,(.*)$")
GROUP = re.compile(r"^dn: (cn=[^,]+,ou=groups,.*)$")


def ssha(password: bytes, salt: bytes) -> str:
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password + salt).digest() + salt).decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--service-dn", required=True)
    ap.add_argument("--service-password", required=True)
    ap.add_argument("--hashes")
    ap.add_argument("--memberof", action="store_true")
    args = ap.parse_args()
    hashes = []
    if args.hashes:
        with open(args.hashes) as f:
            hashes = [line.strip() for line in f if line.strip()]

    blocks = [b.split("\n") for b in sys.stdin.read().split("\n\n") if b.strip()]
    users = []  # (number, digits, lines)
    groups = []  # (dn, lines)
    others = []
    base = None
    for lines in blocks:
        m = USER.match(lines[0])
        g = GROUP.match(lines[0])
        if m:
            users.append((int(m.group(1)), m.group(1), lines))
            base = m.group(2)
        elif g:
            groups.append((g.group(1), lines))
        else:
            others.append(lines)
    if not users:
        sys.exit("login_data.py: no users in the input")
    n = len(users)
    user_dn = {number: lines[0][4:] for number, _, lines in users}

    # The extra groups: (dn, cn, member numbers).
    departments = max(1, n // 100)
    extra = [(f"cn=dept-{d:04d},ou=groups,{base}", f"dept-{d:04d}", range(d, n, departments))
             for d in range(departments)]
    extra += [(f"cn=role-{r},ou=groups,{base}", f"role-{r}", range(r, n, 10)) for r in range(min(10, n))]

    member_of = defaultdict(list)
    if args.memberof:
        for dn, lines in groups:
            for line in lines:
                if line.startswith("member: "):
                    member_of[line[8:]].append(dn)
        for dn, _, members in extra:
            for i in members:
                member_of[user_dn[i]].append(dn)

    out = sys.stdout
    for lines in others:
        out.write("\n".join(lines) + "\n\n")
    svc_rdn = args.service_dn.split(",", 1)[0].split("=", 1)[1]
    out.write(f"dn: {args.service_dn}\nobjectClass: top\nobjectClass: organizationalRole\n"
              f"objectClass: simpleSecurityObject\ncn: {svc_rdn}\n"
              f"userPassword: {ssha(args.service_password.encode(), b'svc-salt')}\n\n")
    for number, digits, lines in users:
        if number < len(hashes):
            value = hashes[number]
        else:
            salt = hashlib.sha1(f"login-bench-salt-{number}".encode()).digest()[:8]
            value = ssha(f"password{digits}".encode(), salt)
        lines = [f"userPassword: {value}" if l.startswith("userPassword:") else l for l in lines]
        lines += [f"memberOf: {g}" for g in member_of.get(lines[0][4:], ())]
        out.write("\n".join(lines) + "\n\n")
    for dn, lines in groups:
        out.write("\n".join(lines) + "\n\n")
    for dn, cn, members in extra:
        out.write(f"dn: {dn}\nobjectClass: top\nobjectClass: groupOfNames\ncn: {cn}\n")
        out.write("".join(f"member: {user_dn[i]}\n" for i in members))
        out.write("\n")


main()
