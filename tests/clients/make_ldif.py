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
- ou=policies and ou=ppolicy: three password policies and one posix user under each
  (userPassword PASSWORD), for SSSD's view of the password policy (sssd.sh): pp-expiring
  (pwdMaxAge 10 days, changed a day ago, warned of from the start), pp-reset (pwdMustChange,
  pwdReset TRUE: an administrator's reset) and pp-locked (locked for good). Outside
  ou=people, so that the other clients' counts of users stay USERS + 2.
"""
import base64
import hashlib
import sys
import time

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


def policies(out, password):
    out += [f"dn: ou=policies,{BASE}", "objectClass: top", "objectClass: organizationalUnit", "ou: policies", ""]
    out += [f"dn: ou=ppolicy,{BASE}", "objectClass: top", "objectClass: organizationalUnit", "ou: ppolicy", ""]
    day = 86400
    settings = {
        "expiring": [f"pwdMaxAge: {10 * day}", f"pwdExpireWarning: {100 * day}"],
        "mustchange": ["pwdMustChange: TRUE"],
        "lockout": ["pwdLockout: TRUE", "pwdMaxFailure: 3"],
    }
    for name, lines in settings.items():
        out += [f"dn: cn={name},ou=policies,{BASE}", "objectClass: top", "objectClass: organizationalRole",
                "objectClass: pwdPolicy", f"cn: {name}", "pwdAttribute: userPassword"] + lines + [""]
    yesterday = time.strftime("%Y%m%d%H%M%SZ", time.gmtime(time.time() - day))
    state = {
        "pp-expiring": ("expiring", [f"pwdChangedTime: {yesterday}"]),
        "pp-reset": ("mustchange", ["pwdReset: TRUE"]),
        "pp-locked": ("lockout", ["pwdAccountLockedTime: 000001010000Z"]),
    }
    for number, (uid, (policy, lines)) in enumerate(state.items(), start=30001):
        out += [f"dn: uid={uid},ou=ppolicy,{BASE}"]
        out += [f"objectClass: {oc}" for oc in ("top", "person", "organizationalPerson", "inetOrgPerson", "posixAccount")]
        out += [f"uid: {uid}", f"cn: {uid}", f"sn: {uid}", f"uidNumber: {number}", "gidNumber: 10000",
                f"homeDirectory: /home/{uid}", "loginShell: /bin/bash",
                f"userPassword: {ssha(password, uid.encode()[:4])}",
                f"pwdPolicySubentry: cn={policy},ou=policies,{BASE}"] + lines + [""]


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
    policies(out, password)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
