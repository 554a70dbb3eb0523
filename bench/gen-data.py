#!/usr/bin/env python3
"""Deterministic inetOrgPerson test data: N users under ou=people and N/100 groups of
ten members under ou=groups, all below dc=example,dc=com. Usage: gen-data.py N > data.ldif"""
import sys

def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    out = sys.stdout
    out.write("dn: dc=example,dc=com\nobjectClass: top\nobjectClass: dcObject\n"
              "objectClass: organization\ndc: example\no: Example\n\n")
    for ou in ("people", "groups"):
        out.write(f"dn: ou={ou},dc=example,dc=com\nobjectClass: top\n"
                  f"objectClass: organizationalUnit\nou: {ou}\n\n")
    for i in range(n):
        uid = f"user{i:05d}" if n <= 100000 else f"user{i:07d}"
        out.write(
            f"dn: uid={uid},ou=people,dc=example,dc=com\n"
            "objectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n"
            "objectClass: inetOrgPerson\n"
            f"uid: {uid}\ncn: user {i}\nsn: {i}\ngivenName: User\n"
            f"mail: {uid}@example.com\ntelephoneNumber: +1 555 {i % 10000:04d}\n"
            f"userPassword: password{i}\n\n")
    for g in range(max(1, n // 100)):
        out.write(f"dn: cn=group{g:05d},ou=groups,dc=example,dc=com\nobjectClass: top\n"
                  f"objectClass: groupOfNames\ncn: group{g:05d}\n")
        for m in range(10):
            i = (g * 10 + m) % n
            uid = f"user{i:05d}" if n <= 100000 else f"user{i:07d}"
            out.write(f"member: uid={uid},ou=people,dc=example,dc=com\n")
        out.write("\n")

main()
