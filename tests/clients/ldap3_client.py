#!/usr/bin/python3
"""python ldap3 (Debian's python3-ldap3) against ferrodir, as run.sh sets it up.

Over StartTLS with the test CA, bound as the reader (plain searches stop at 500 entries,
paged ones do not):
- Server(get_info=ALL) reads the root DSE and the schema;
- the paged_search generator over all users returns each exactly once, and a first page
  really is a page (500 entries and a cookie);
- server-side sort (RFC 2891, 1.2.840.113556.1.4.473): by sn with the ordering rule named
  in the request (sn has none of its own; without one, inappropriateMatching as slapd),
  by uidNumber reversed (its integerOrderingMatch: 9999 before 10001), and sorted across
  pages; each with a sortResult of success.
Prints a PASS or FAIL line per check; exits 1 if any failed.
"""
import os
import ssl
import sys
import traceback

from ldap3 import ALL, AUTO_BIND_TLS_BEFORE_BIND, NONE, SUBTREE, Connection, Server, Tls

CLIENT = "ldap3"
PAGED = "1.2.840.113556.1.4.319"
SORT = "1.2.840.113556.1.4.473"
SORT_RESULT = "1.2.840.113556.1.4.474"
CASE_IGNORE_ORDERING = "2.5.13.3"
BASE_DN = os.environ["BASE_DN"]
PEOPLE = f"ou=people,{BASE_DN}"
USERS = int(os.environ["USERS"])
failed = 0


def verdict(ok, what, detail=""):
    global failed
    if ok:
        print(f"PASS {CLIENT}: {what}")
    else:
        failed += 1
        print(f"FAIL {CLIENT}: {what}")
        if detail:
            for line in str(detail).splitlines()[:20]:
                print(f"    {line}")
    sys.stdout.flush()


def tlv(tag, body):
    n = len(body)
    if n < 0x80:
        length = bytes([n])
    else:
        octets = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return bytes([tag]) + length + body


def sort_control(*keys, critical=False):
    """The RFC 2891 request control: keys are (attribute, ordering rule or None, reverse)."""
    items = b"".join(
        tlv(
            0x30,
            tlv(0x04, attr.encode())
            + (tlv(0x80, rule.encode()) if rule else b"")
            + (tlv(0x81, b"\xff") if reverse else b""),
        )
        for attr, rule, reverse in keys
    )
    return (SORT, critical, tlv(0x30, items))


def sort_result(result):
    """The sortResult code of a SearchResultDone, or None when the control is missing."""
    control = (result.get("controls") or {}).get(SORT_RESULT)
    if control is None:
        return None
    value = control.get("value")
    if isinstance(value, dict):  # in case this ldap3 version decodes it
        return value.get("sortResult", value)
    value = bytes(value or b"")
    # SEQUENCE { ENUMERATED sortResult, [0] attributeType OPTIONAL }
    if len(value) >= 5 and value[0] == 0x30 and value[2] == 0x0A and value[3] == 1:
        return value[4]
    return f"undecodable {value.hex()}"


def connect(get_info=ALL):
    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=os.environ["CA_FILE"], version=ssl.PROTOCOL_TLS_CLIENT)
    server = Server("127.0.0.1", port=int(os.environ["LDAP_PORT"]), tls=tls, get_info=get_info)
    conn = Connection(
        server,
        os.environ["READER_DN"],
        os.environ["READER_PW"],
        auto_bind=AUTO_BIND_TLS_BEFORE_BIND,
        receive_timeout=60,
    )
    return server, conn


def check_info(server):
    info = server.info
    contexts = [str(c) for c in (info.naming_contexts or [])] if info else []
    verdict(info is not None and BASE_DN in contexts, "get_info=ALL reads the root DSE (namingContexts)", f"info: {info}")
    controls = [c[0] for c in (info.supported_controls or [])] if info else []
    verdict(
        PAGED in controls and SORT in controls,
        "the root DSE advertises paged results (…4.319) and server-side sort (…4.473)",
        f"supportedControl: {controls}",
    )
    schema = server.schema
    classes = set(schema.object_classes) if schema else set()
    attrs = set(schema.attribute_types) if schema else set()
    verdict(
        {"inetOrgPerson", "posixAccount", "posixGroup"} <= classes and {"uidNumber", "member", "entryUUID"} <= attrs,
        "get_info=ALL reads the schema (inetOrgPerson, posixAccount, uidNumber, entryUUID)",
        f"{len(classes)} object classes, {len(attrs)} attribute types",
    )


def check_paging(conn):
    ok = conn.search(PEOPLE, "(objectClass=posixAccount)", SUBTREE, attributes=["uid"], paged_size=500)
    entries = len(conn.response or [])
    cookie = ((conn.result.get("controls") or {}).get(PAGED) or {}).get("value", {}).get("cookie")
    verdict(
        ok and entries == 500 and bool(cookie),
        "a paged search's first page: 500 entries and a cookie",
        f"result {conn.result.get('description')}, {entries} entries, cookie {cookie!r}",
    )
    if cookie:
        conn.search(PEOPLE, "(objectClass=posixAccount)", SUBTREE, attributes=["uid"], paged_size=0, paged_cookie=cookie)
        verdict(
            conn.result.get("result") == 0 and not conn.response,
            "pageSize 0 with the cookie abandons the paged search",
            f"result {conn.result}, {len(conn.response or [])} entries",
        )
    else:
        verdict(False, "pageSize 0 with the cookie abandons the paged search", "no cookie came back to send")

    want = USERS + 2
    seen = {}
    generator = conn.extend.standard.paged_search(
        PEOPLE, "(objectClass=posixAccount)", SUBTREE, attributes=["uid"], paged_size=1000, generator=True
    )
    for item in generator:
        if item.get("type") == "searchResEntry":
            seen[item["dn"].lower()] = seen.get(item["dn"].lower(), 0) + 1
    twice = [dn for dn, n in seen.items() if n > 1]
    verdict(
        len(seen) == want and not twice and conn.result.get("result") == 0,
        f"the paged_search generator returns all {want} users, each exactly once",
        f"{len(seen)} distinct of {want}, {len(twice)} more than once (e.g. {twice[:3]}), last result {conn.result}",
    )


SUBSET = "(|(uid=alice)(uid=bob)(uid=user000*))"


def expected(conn, key):
    conn.search(PEOPLE, SUBSET, SUBTREE, attributes=["uid", "sn", "uidNumber"])
    rows = [(e["attributes"]["uid"][0], e["attributes"]["sn"][0], int(e["attributes"]["uidNumber"])) for e in conn.response]
    return rows, [r[0] for r in sorted(rows, key=key)]


def check_sort(conn):
    rows, by_sn = expected(conn, lambda r: r[1].lower())
    verdict(len(rows) == 101, "the sort subset has 101 users", f"{len(rows)}")
    # sn has no ordering rule of its own (name has none): the request names one.
    conn.search(PEOPLE, SUBSET, SUBTREE, attributes=["uid"], controls=[sort_control(("sn", CASE_IGNORE_ORDERING, False))])
    got = [e["attributes"]["uid"][0] for e in conn.response]
    code = sort_result(conn.result)
    verdict(
        got == by_sn and code == 0,
        "sorted by sn with caseIgnoreOrderingMatch named in the request, sortResult success",
        f"sortResult {code}; {conn.result.get('description')}; first got {got[:5]}, want {by_sn[:5]}",
    )
    # Without one, as slapd's sssvlv: inappropriateMatching (18) (slapd sends no sortResult).
    conn.search(PEOPLE, SUBSET, SUBTREE, attributes=["uid"], controls=[sort_control(("sn", None, False), critical=True)])
    code = sort_result(conn.result)
    verdict(
        conn.result.get("result") == 18 and code in (None, 18) and not conn.response,
        "a critical sort on sn with no ordering rule: inappropriateMatching (18), as slapd",
        f"result {conn.result.get('result')} {conn.result.get('description')}, sortResult {code}, {len(conn.response or [])} entries",
    )

    by_number_desc = [r[0] for r in sorted(rows, key=lambda r: -r[2])]
    conn.search(PEOPLE, SUBSET, SUBTREE, attributes=["uid"], controls=[sort_control(("uidNumber", None, True))])
    got = [e["attributes"]["uid"][0] for e in conn.response]
    code = sort_result(conn.result)
    verdict(
        got == by_number_desc and code == 0,
        "reverse uidNumber order is numeric (integerOrderingMatch), sortResult success",
        f"sortResult {code}; last got {got[-4:]}, want {by_number_desc[-4:]}",
    )

    # Sorted and paged: the cookie loop by hand, since ldap3's paged_search generator yields
    # each page's entries last first (it pops them off the page's list).
    # On a connection of its own: slapd's sssvlv may still count the previous sort as in
    # progress right after its result (busy (51), "Other sort requests already in progress").
    _, conn = connect(get_info=NONE)
    control = sort_control(("sn", CASE_IGNORE_ORDERING, False))
    got, cookie, pages, codes, results = [], None, 0, set(), []
    while pages < 20:
        conn.search(PEOPLE, SUBSET, SUBTREE, attributes=["uid"], paged_size=30, paged_cookie=cookie, controls=[control])
        got += [e["attributes"]["uid"][0] for e in conn.response]
        codes.add(sort_result(conn.result))
        results.append(f"{conn.result.get('result')} {conn.result.get('message')}".strip())
        pages += 1
        cookie = ((conn.result.get("controls") or {}).get(PAGED) or {}).get("value", {}).get("cookie")
        if not cookie:
            break
    verdict(
        got == by_sn and pages == 4 and codes == {0},
        "sorted by sn across 4 pages of 30, sortResult success on each",
        f"{pages} pages (results {results}), sortResult {codes}; {len(got)} entries; first got {got[:5]}, want {by_sn[:5]}",
    )
    conn.unbind()


def main():
    try:
        server, conn = connect()
    except Exception:
        verdict(False, "StartTLS and bind as the reader", traceback.format_exc())
        return 1
    verdict(conn.bound and conn.tls_started, "StartTLS (certificate checked) and bind as the reader")
    for step in (lambda: check_info(server), lambda: check_paging(conn), lambda: check_sort(conn)):
        try:
            step()
        except Exception:
            verdict(False, "an exception", traceback.format_exc())
    conn.unbind()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
