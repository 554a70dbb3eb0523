#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs, at run time: the small hand-made seeds in
# fuzz/seeds/ (one per line; .hex lines are bytes) and inputs derived from the shared test
# data (OpenLDAP's LDIF and schema files, the PROTOS c06-ldapv3 PDUs). The corpora are not
# committed; libFuzzer adds what it finds to them.
#   usage: bash fuzz/seed.sh [testdata dir]
# The test data is, in order: the argument, $FERRODIR_TESTDATA, ../shared/testdata beside the
# repository, the repository's own copy (testdata/).
set -euo pipefail
cd "$(dirname "$0")"
fuzz_dir=$PWD
testdata="${1:-${FERRODIR_TESTDATA:-$fuzz_dir/../../shared/testdata}}"
[ -d "$testdata" ] || testdata="$fuzz_dir/../testdata"
echo "seed.sh: test data from $testdata"
openldap="$testdata/conformance/openldap"
protos="$testdata/conformance/protos-c06-ldapv3"

corpus() { mkdir -p "corpus/$1"; echo "corpus/$1"; }

# One seed file per line of $2 (text), named after the source and the line number.
lines_to_seeds() {
    local dir name=$(basename "$2") n=0
    dir=$(corpus "$1")
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        printf '%s' "$line" >"$dir/$name.$n"
    done <"$2"
}

# Same, for lines of hex: the seed holds the bytes.
hex_to_seeds() {
    local dir name=$(basename "$2") n=0
    dir=$(corpus "$1")
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        printf '%s' "$line" | xxd -r -p >"$dir/$name.$n"
    done <"$2"
}

hex_to_seeds message seeds/message.hex
hex_to_seeds frame seeds/message.hex
hex_to_seeds filter_ber seeds/filter_ber.hex
lines_to_seeds filter_string seeds/filter_string.txt
lines_to_seeds dn seeds/dn.txt

if [ -d "$protos" ]; then
    cp "$protos"/* "$(corpus frame)/"
    cp "$protos"/* "$(corpus message)/"
else
    echo "seed.sh: no PROTOS PDUs at $protos; hand-made seeds only" >&2
fi

if [ -d "$openldap" ]; then
    # Whole LDIF files, and each record of them on its own.
    ldif_dir=$(corpus ldif)
    for file in "$openldap"/*.ldif "$openldap"/*.out*; do
        cp "$file" "$ldif_dir/"
        awk -v out="$ldif_dir/$(basename "$file").record" \
            'BEGIN { RS = ""; n = 0 } { n++; print > (out "." n) }' "$file"
    done
    # Every DN of the LDIF files (plain dn: lines only), one per seed.
    dn_dir=$(corpus dn)
    grep -h '^dn: ' "$openldap"/*.ldif | sed 's/^dn: //' | sort -u | awk -v out="$dn_dir/ldif" \
        '{ n++; printf "%s", $0 > (out "." n) }'
    # The schema file whole, and each definition (a paragraph) alone.
    schema_dir=$(corpus schema)
    cp "$openldap/test.schema" "$schema_dir/"
    awk -v out="$schema_dir/test.schema.part" 'BEGIN { RS = ""; n = 0 } { n++; print > (out "." n) }' \
        "$openldap/test.schema"
    # slapd's published definitions (RFC 4512 form) as .schema directives, a few per seed.
    subschema="$testdata/conformance/schema/slapd-2.5.13-subschema.ldif"
    if [ -f "$subschema" ]; then
        grep -E '^(attributeTypes|objectClasses|ldapSyntaxes): ' "$subschema" |
            sed -E 's/^attributeTypes: /attributetype /; s/^objectClasses: /objectclass /; s/^ldapSyntaxes: /ldapsyntax /' |
            awk -v out="$schema_dir/slapd-subschema" '{ n++; print >> (out "." int(n / 8)) }'
    fi
else
    echo "seed.sh: no OpenLDAP test data at $openldap" >&2
    mkdir -p corpus/ldif corpus/schema
    printf 'dn: dc=example,dc=com\nobjectClass: domain\ndc: example\n' >corpus/ldif/minimal
    printf "attributetype ( 1.2.3 NAME 'x' SUP name )\n" >corpus/schema/minimal
fi

for target in corpus/*; do
    echo "seed.sh: $target: $(find "$target" -type f | wc -l) seeds"
done
