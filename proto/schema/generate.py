#!/usr/bin/env python3
"""Generates Ferrodir's built-in schema data files from slapd's published subschema.

Input: the cn=Subschema entry that slapd 2.5.13 publishes with core, cosine, inetorgperson,
nis, openldap and OpenLDAP's test.schema loaded (one unfolded value per line), and
test.schema itself, whose definitions are left out (the tests load that file on its own).

Output (OpenLDAP .schema syntax, one definition per line, in slapd's order):
- standard.schema: slapd's built-in operational schema plus core (RFC 4512/4519), cosine
  (RFC 4524), inetorgperson (RFC 2798) and nis (RFC 2307).
- openldap.schema: the classes of OpenLDAP's openldap.schema (OpenLDAPorg, OpenLDAPou,
  OpenLDAPperson, OpenLDAPdisplayableObject).
- hidden.schema: types slapd defines but hides from cn=Subschema (SLAP_AT_HIDE in
  schema_prep.c); object classes above need them (subentry, subschema).

ldapSyntaxes, matchingRules and matchingRuleUse are not written: the server derives them
from its own syntax and matching rule tables.

Usage: python3 generate.py [SUBSCHEMA_LDIF [TEST_SCHEMA]]  (run from this directory)
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "..", "testdata", "conformance")
DEFAULT_LDIF = os.path.join(TESTDATA, "schema", "slapd-2.5.13-subschema.ldif")
DEFAULT_TEST_SCHEMA = os.path.join(TESTDATA, "openldap", "test.schema")

# cn=config's own schema (olc* types and classes) lives under this arc.
CONFIG_ARC = "1.3.6.1.4.1.4203.1.12.2."
# OpenLDAP's openldap.schema classes live under this arc; 4203.1.4.1 (OpenLDAProotDSE) is
# not from that file but built into slapd (schema_prep.c), so it stays in standard.schema.
OPENLDAP_CLASS_ARC = "1.3.6.1.4.1.4203.1.4."
ROOT_DSE_CLASS = "1.3.6.1.4.1.4203.1.4.1"

# Facts from RFC 4512 §4.2 and RFC 3672 §2.3, worded as slapd 2.5's schema_prep.c has them.
HIDDEN = [
    "attributetype ( 2.5.18.6 NAME 'subtreeSpecification' DESC 'RFC3672: subtree specification' "
    "SINGLE-VALUE USAGE directoryOperation SYNTAX 1.3.6.1.4.1.1466.115.121.1.45 )",
    "attributetype ( 2.5.21.1 NAME 'dITStructureRules' DESC 'RFC4512: DIT structure rules' "
    "EQUALITY integerFirstComponentMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.17 "
    "USAGE directoryOperation )",
    "attributetype ( 2.5.21.2 NAME 'dITContentRules' DESC 'RFC4512: DIT content rules' "
    "EQUALITY objectIdentifierFirstComponentMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.16 "
    "USAGE directoryOperation )",
    "attributetype ( 2.5.21.7 NAME 'nameForms' DESC 'RFC4512: name forms ' "
    "EQUALITY objectIdentifierFirstComponentMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.35 "
    "USAGE directoryOperation )",
    # Proxy authorization rules (slapd's schema_prep.c, hidden there too). slapd's own
    # authzMatch and authzSyntax are stood in for by octetStringMatch and Octet String:
    # the values are compared as stored (ferrodir reads them as rules, never matches them).
    "attributetype ( 1.3.6.1.4.1.4203.666.1.8 NAME ( 'authzTo' 'saslAuthzTo' ) "
    "DESC 'proxy authorization targets' EQUALITY octetStringMatch "
    "SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 USAGE distributedOperation )",
    "attributetype ( 1.3.6.1.4.1.4203.666.1.9 NAME ( 'authzFrom' 'saslAuthzFrom' ) "
    "DESC 'proxy authorization sources' EQUALITY octetStringMatch "
    "SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 USAGE distributedOperation )",
    # Ferrodir's own (an OID under 2.25, ITU-T X.667's UUID arc, needing no registration):
    # per-attribute CSNs of an entry in a multi-provider mesh, never shown in `+`.
    "attributetype ( 2.25.113535123185571262098407690236152094801 NAME 'ferrodirAttrCSN' "
    "DESC 'Ferrodir: the CSN of the last change of each attribute and of the name, for "
    "multi-provider conflicts' EQUALITY octetStringMatch "
    "SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 NO-USER-MODIFICATION USAGE directoryOperation )",
    # The class of the stand-in parents a replication consumer makes for an entry whose
    # parent it lacks (slapd's schema_prep.c, hidden there too): a multi-provider conflict.
    "objectclass ( 1.3.6.1.4.1.4203.666.3.4 NAME 'glue' DESC 'Glue Entry' SUP top STRUCTURAL )",
]

OID_RE = re.compile(r"^\(\s*([0-9][0-9.]*)\s")


def test_schema_oids(path):
    """The OIDs test.schema defines: every `( <numeric oid>` that opens a definition."""
    with open(path, encoding="utf-8") as f:
        return set(re.findall(r"\(\s*([0-9][0-9.]*[0-9])\s", f.read()))


def read_values(path):
    """(kind, definition) for each attributeTypes/objectClasses value, in file order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(" "):
                raise SystemExit("folded LDIF lines are not expected in " + path)
            name, sep, value = line.partition(": ")
            if not sep:
                continue
            kind = {"attributetypes": "attributetype", "objectclasses": "objectclass"}.get(
                name.lower())
            if kind:
                out.append((kind, value.strip()))
    return out


def header(title, source, lines):
    return [
        "# " + title,
        "# Generated by generate.py from " + source + "; do not edit by hand.",
        "# One definition per line (OpenLDAP .schema syntax, RFC 4512 descriptions).",
        "#",
    ] + ["# " + l for l in lines] + [""]


SLAPD_ORDER = "In the order slapd 2.5.13 publishes them in cn=Subschema."


def main():
    ldif = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LDIF
    test_schema = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_TEST_SCHEMA
    excluded = test_schema_oids(test_schema)
    standard, openldap = [], []
    skipped = {"test.schema": 0, "cn=config": 0}
    for kind, definition in read_values(ldif):
        m = OID_RE.match(definition)
        if not m:
            raise SystemExit("no numeric OID in: " + definition)
        oid = m.group(1)
        if oid in excluded:
            skipped["test.schema"] += 1
        elif oid.startswith(CONFIG_ARC):
            skipped["cn=config"] += 1
        elif kind == "objectclass" and oid.startswith(OPENLDAP_CLASS_ARC) and oid != ROOT_DSE_CLASS:
            openldap.append(kind + " " + definition)
        else:
            standard.append(kind + " " + definition)
    # Types first, then classes: every class then finds the types it names.
    standard.sort(key=lambda line: 0 if line.startswith("attributetype ") else 1)
    source = os.path.basename(ldif)
    counts = "%d definitions (%d left out from test.schema, %d from cn=config's schema)" % (
        len(standard), skipped["test.schema"], skipped["cn=config"])
    files = {
        "standard.schema": header(
            "slapd built-ins, core (RFC 4512/4519), cosine (RFC 4524), inetorgperson "
            "(RFC 2798), nis (RFC 2307).", source, [SLAPD_ORDER, counts]) + standard,
        "openldap.schema": header(
            "OpenLDAP's openldap.schema classes.", source, [SLAPD_ORDER]) + openldap,
        "hidden.schema": header(
            "Types slapd defines but does not publish (SLAP_AT_HIDE).",
            "RFC 4512 section 4.2 and RFC 3672 section 2.3 (wording of slapd's schema_prep.c)",
            ["Loaded first and left out of cn=Subschema; subentry and subschema name them."])
        + HIDDEN,
    }
    for name, lines in files.items():
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print("%s: %d lines" % (name, len(lines)))


if __name__ == "__main__":
    main()
