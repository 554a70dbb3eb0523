#!/usr/bin/env bash
# Times 300 deletes (one ldapdelete, one connection, sequential) with refint off and on;
# on: each deleted entry is named by one group's member. Usage: run.sh BINARY
set -euo pipefail
BIN=$1
N=${N:-300}
for mode in off on; do
  dir=$(mktemp -d)
  cat > $dir/c.toml <<T
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[log]
level = "error"
[access_log]
enabled = false
[refint]
enabled = $([ $mode = on ] && echo true || echo false)
nothing = "cn=nobody,dc=example,dc=com"
T
  $BIN serve --config $dir/c.toml --data-dir $dir/data --listen 127.0.0.1:0 > $dir/out 2>$dir/err &
  pid=$!
  for i in $(seq 100); do grep -q "listening on" $dir/out && break; sleep 0.1; done
  addr=$(sed -n 's/.*listening on //p' $dir/out | head -1)
  url="ldap://$addr"
  { echo "dn: ou=b,dc=example,dc=com"; echo "objectClass: organizationalUnit"; echo "ou: b"; echo;
    for i in $(seq $N); do echo "dn: uid=u$i,ou=b,dc=example,dc=com"; echo "objectClass: inetOrgPerson"; echo "uid: u$i"; echo "cn: u$i"; echo "sn: u$i"; echo; done
    for g in $(seq 10); do echo "dn: cn=g$g,dc=example,dc=com"; echo "objectClass: groupOfNames"; echo "cn: g$g";
      for i in $(seq $g 10 $N); do echo "member: uid=u$i,ou=b,dc=example,dc=com"; done; echo; done
  } | ldapadd -x -H $url -D cn=admin,dc=example,dc=com -w secret > /dev/null
  dns=$(for i in $(seq $N); do echo "uid=u$i,ou=b,dc=example,dc=com"; done)
  start=$(date +%s.%N)
  echo "$dns" | ldapdelete -x -H $url -D cn=admin,dc=example,dc=com -w secret
  end=$(date +%s.%N)
  left=$(ldapsearch -x -LLL -H $url -D cn=admin,dc=example,dc=com -w secret -b dc=example,dc=com "(objectClass=groupOfNames)" member | grep -c "^member: uid=u[0-9]*,ou=b," || true)
  echo "refint $mode: $N deletes in $(echo "$end - $start" | bc) s; member values left naming deleted users: $left"
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf $dir
done
