#!/usr/bin/env python3
"""Deterministic inetOrgPerson test data: N users under ou=people and N/100 groups of
ten members under ou=groups, all below dc=example,dc=com.

Usage: gen-data.py N [--issue11] [--memberof] > data.ldif

--issue11 adds what the paged, sorted and memberof scenarios of bench/run.sh need (issue
#11), and nothing else changes, so the other scenarios' data stays the same without it:
  - departmentNumber: D on every user, D = i mod max(1, N/1000): N/1000 departments of
    1,000 users each when N is a multiple of 1,000 (the sorted scenario's filter); a
    department's users are spread over the whole id range, so sorting them by cn is not
    the order they were added in;
  - cn=big1000,ou=groups: a groupOfNames of exactly min(N, 1,000) users (every
    max(1, N/1000)-th user from user 3 on, not a department: the memberOf scenario);
  - nesting: cn=nest-outer holds cn=big1000, cn=group00000 and users 0..9;
    cn=nest-top holds cn=nest-outer. cn=big1000 itself holds only users, so its direct
    and its transitive members are the same 1,000 entries.
--memberof (with --issue11) also writes memberOf on every entry that is a member of a
  group (users and groups alike, direct memberships only), as slapd's memberof overlay
  would have maintained them: slapadd bypasses overlays, so slapd's copy of the data must
  carry them. Ferrodir computes memberOf itself and refuses it from users
  (NO-USER-MODIFICATION): its copy is made without this flag.

The output is streamed (issue #28: 10M entries): what the script holds in memory does not
grow with N. Each group's members and each user's groups are computed from the numbering
as they are written; only cn=big1000's member set (at most 1,000 ids) is kept."""
import sys

BASE = "dc=example,dc=com"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    unknown = flags - {"--issue11", "--memberof"}
    if unknown or ("--memberof" in flags and "--issue11" not in flags):
        sys.exit(f"usage: gen-data.py N [--issue11 [--memberof]] (unknown: {sorted(unknown)})")
    n = int(args[0]) if args else 10000
    if n < 1:
        sys.exit("gen-data.py: N must be at least 1")
    issue11, with_memberof = "--issue11" in flags, "--memberof" in flags
    uid_of = (lambda i: f"user{i:05d}") if n <= 100000 else (lambda i: f"user{i:07d}")
    user_dn = lambda i: f"uid={uid_of(i)},ou=people,{BASE}"
    group_dn = lambda name: f"cn={name},ou=groups,{BASE}"

    # groupG (G < n_groups) names users (10G + m) mod N for m in 0..9. With N >= 100 that
    # is 10G..10G+9 (n_groups * 10 <= N/10, no wrap); with N < 100 there is one group,
    # users m mod N. Either way user i is in exactly group i // 10 when that group exists.
    n_groups = max(1, n // 100)
    departments = max(1, n // 1000)
    # cn=big1000: at most 1,000 ids, whatever N is.
    big = sorted({(3 + k * departments) % n for k in range(min(n, 1000))}) if issue11 else []
    big_set = set(big)

    def user_groups(i):  # the groups naming user i, in the order the groups are written
        groups = []
        if i // 10 < n_groups:
            groups.append(group_dn(f"group{i // 10:05d}"))
        if issue11:
            if i in big_set:
                groups.append(group_dn("big1000"))
            if i < 10:  # nest-outer names users j mod N for j in 0..9: i < 10 as i < N
                groups.append(group_dn("nest-outer"))
        return groups

    # Groups that are members of groups (issue11 only): their memberOf.
    group_member_of = {"group00000": ["nest-outer"], "big1000": ["nest-outer"],
                       "nest-outer": ["nest-top"]} if with_memberof else {}

    out = sys.stdout
    out.write(f"dn: {BASE}\nobjectClass: top\nobjectClass: dcObject\n"
              "objectClass: organization\ndc: example\no: Example\n\n")
    for ou in ("people", "groups"):
        out.write(f"dn: ou={ou},{BASE}\nobjectClass: top\n"
                  f"objectClass: organizationalUnit\nou: {ou}\n\n")
    for i in range(n):
        uid = uid_of(i)
        out.write(
            f"dn: {user_dn(i)}\n"
            "objectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n"
            "objectClass: inetOrgPerson\n"
            f"uid: {uid}\ncn: user {i}\nsn: {i}\ngivenName: User\n"
            f"mail: {uid}@example.com\ntelephoneNumber: +1 555 {i % 10000:04d}\n"
            f"userPassword: password{i}\n")
        if issue11:
            out.write(f"departmentNumber: {i % departments}\n")
        if with_memberof:
            for group in user_groups(i):
                out.write(f"memberOf: {group}\n")
        out.write("\n")

    def write_group(name, members):  # members: an iterable of DNs, written as given
        out.write(f"dn: {group_dn(name)}\nobjectClass: top\n"
                  f"objectClass: groupOfNames\ncn: {name}\n")
        for dn in members:
            out.write(f"member: {dn}\n")
        for group in group_member_of.get(name, ()):
            out.write(f"memberOf: {group_dn(group)}\n")
        out.write("\n")

    for g in range(n_groups):
        write_group(f"group{g:05d}", (user_dn((g * 10 + m) % n) for m in range(10)))
    if issue11:
        write_group("big1000", (user_dn(i) for i in big))
        write_group("nest-outer", [group_dn("big1000"), group_dn("group00000")]
                    + [user_dn(i % n) for i in range(10)])
        write_group("nest-top", [group_dn("nest-outer")])


main()
