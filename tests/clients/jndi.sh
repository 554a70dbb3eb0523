#!/usr/bin/env bash
# Compiles Jndi.java with the JDK's javac (Debian: default-jdk-headless) and runs it with a
# trust store holding the test CA (for Keycloak's StartTLS). Run by run.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/clients/lib.sh
source "$here/lib.sh"
for tool in javac java keytool; do
    command -v "$tool" >/dev/null || { fail jndi "$tool is not installed (Debian: default-jdk-headless)"; exit 1; }
done
out=$CLIENTS_WORK/jndi
mkdir -p "$out"
if ! log=$(javac -d "$out" "$here/Jndi.java" 2>&1); then
    fail jndi "javac Jndi.java" "$log"
    exit 1
fi
if ! log=$(keytool -importcert -noprompt -alias ferrodir-test-ca -file "$CA_FILE" \
    -keystore "$out/trust.p12" -storetype PKCS12 -storepass changeit 2>&1); then
    fail jndi "keytool -importcert (the test CA)" "$log"
    exit 1
fi
exec java -Djavax.net.ssl.trustStore="$out/trust.p12" -Djavax.net.ssl.trustStoreType=PKCS12 \
    -Djavax.net.ssl.trustStorePassword=changeit -cp "$out" Jndi
