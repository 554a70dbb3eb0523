#!/usr/bin/env python3
"""Writes the LDIF that tests/clients loads: posix users and nested groups.

    make_ldif.py USERS PASSWORD READER_PASSWORD > data.ldif

- ou=people: alice and bob (userPassword PASSWORD, as {SSHA}), then userNNNNN for N in
  1..USERS. Every user is inetOrgPerson + posixAccount (uidNumber 10000 + N, primary group
  employees, gidNumber 10000), with a mail address uid@example.com. Their sn is a scrambled
  word, so that sorting by sn is an order no storage layout gives by accident, and their
  uidNumbers cross a digit boundary (9998 .. 10000 + USERS) so that an integer order and a
  string order differ.
- ou=groups: posixGroup entries with rfc2307bis `member` DNs (extensibleObject allows
  member on posixGroup, which is structural in the nis schema ferrodir ships):
  employees (10000: alice, bob), developers (20001: alice, user00001),
  platform (20002: bob and the group developers, nested), allhands (20003: the group platform,
  a second level of nesting).
- ou=services: cn=reader (userPassword READER_PASSWORD), the account the clients bind as.
"""
import base64
import hashlib
import sys

BASE = "dc=example,dc=com"


def ssha(password: str, salt: bytes) -> str:
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def scrambled(n: int) -> str:
    # A word from the number's hash: deterministic, in no relation to uid or insertion order.
    h = hashlib.sha256(str(n).encode()).digest()
    letters = "".join(chr(ord("a") + b % 26) for b in h[:6])
    return letters.capitalize()


def user(out, uid, number, password=None):
    dn = f"uid={uid},ou=people,{BASE}"
    out.append(f"dn: {dn}")
    for oc in ("top", "person", "organizationalPerson", "inetOrgPerson", "posixAccount"):
        out.append(f"objectClass: {oc}")
    out.append(f"uid: {uid}")
    out.append(f"cn: {uid.capitalize()} Tester")
    out.append(f"sn: {scrambled(number)}")
    out.append(f"mail: {uid}@example.com")
    out.append(f"uidNumber: {number}")
    out.append("gidNumber: 10000")
    out.append(f"homeDirectory: /home/{uid}")
    out.append("loginShell: /bin/bash")
    out.append(f"gecos: {uid.capitalize()} Tester")
    if password is not None:
        out.append(f"userPassword: {ssha(password, uid.encode()[:4].ljust(4, b'x'))}")
    out.append("")


def group(out, cn, gid, members):
    out.append(f"dn: cn={cn},ou=groups,{BASE}")
    for oc in ("top", "posixGroup", "extensibleObject"):
        out.append(f"objectClass: {oc}")
    out.append(f"cn: {cn}")
    out.append(f"gidNumber: {gid}")
    for member in members:
        out.append(f"member: {member}")
    out.append("")


def main():
    users = int(sys.argv[1])
    password = sys.argv[2]
    reader_password = sys.argv[3]
    out = [f"dn: {BASE}", "objectClass: top", "objectClass: dcObject", "objectClass: organization",
           "dc: example", "o: Example", ""]
    for ou in ("people", "groups", "services"):
        out += [f"dn: ou={ou},{BASE}", "objectClass: top", "objectClass: organizationalUnit", f"ou: {ou}", ""]
    out += [f"dn: cn=reader,ou=services,{BASE}", "objectClass: top", "objectClass: applicationProcess",
            "objectClass: simpleSecurityObject", "cn: reader",
            f"userPassword: {ssha(reader_password, b'rdr1')}", ""]
    user(out, "alice", 9998, password)
    user(out, "bob", 9999, password)
    for n in range(1, users + 1):
        user(out, f"user{n:05d}", 10000 + n)
    people = lambda uid: f"uid={uid},ou=people,{BASE}"
    groups = lambda cn: f"cn={cn},ou=groups,{BASE}"
    group(out, "employees", 10000, [people("alice"), people("bob")])
    group(out, "developers", 20001, [people("alice"), people("user00001")])
    group(out, "platform", 20002, [people("bob"), groups("developers")])
    group(out, "allhands", 20003, [groups("platform")])
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
