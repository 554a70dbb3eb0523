# ruby-net-ldap (Debian's ruby-net-ldap, the library GitLab's LDAP sign-in uses) against
# ferrodir, as run.sh sets it up: StartTLS with the test CA, bound as the reader.
# - net-ldap pages on its own (pages of 126) when the root DSE lists the paged-results
#   control: all users come back, each once, past the reader's 500-entry plain limit;
# - GitLab's user lookup by uid, and a user_filter on memberOf (direct memberships).
# Prints a PASS or FAIL line per check; exits 1 if any failed.
require "net/ldap"
require "openssl"
require "set"

CLIENT = "net-ldap"
PAGED = "1.2.840.113556.1.4.319"
BASE = ENV.fetch("BASE_DN")
PEOPLE = "ou=people,#{BASE}"
GROUPS = "ou=groups,#{BASE}"
$failed = 0

def verdict(ok, what, detail = "")
  if ok
    puts "PASS #{CLIENT}: #{what}"
  else
    $failed += 1
    puts "FAIL #{CLIENT}: #{what}"
    detail.to_s.lines.first(20).each { |line| puts "    #{line.chomp}" }
  end
  $stdout.flush
end

ldap = Net::LDAP.new(
  host: "127.0.0.1",
  port: Integer(ENV.fetch("LDAP_PORT")),
  auth: { method: :simple, username: ENV.fetch("READER_DN"), password: ENV.fetch("READER_PW") },
  encryption: {
    method: :start_tls,
    tls_options: { ca_file: ENV.fetch("CA_FILE"), verify_mode: OpenSSL::SSL::VERIFY_PEER },
  },
  connect_timeout: 10,
)

def result(ldap)
  r = ldap.get_operation_result
  "#{r.code} #{r.message} #{r.error_message}"
end

begin
  ok = ldap.bind
  verdict(ok, "StartTLS (certificate checked) and bind as the reader", result(ldap))
  exit 1 unless ok

  dse = ldap.search_root_dse
  controls = dse ? Array(dse[:supportedcontrol]) : []
  verdict(controls.include?(PAGED), "the root DSE advertises paged results", "supportedControl #{controls.inspect}")

  # Net::LDAP#search pages by itself when the root DSE advertised the control.
  want = Integer(ENV.fetch("USERS")) + 2
  seen = Hash.new(0)
  ldap.search(base: PEOPLE, filter: Net::LDAP::Filter.eq("objectClass", "posixAccount"),
              attributes: ["uid"], return_result: false) do |entry|
    seen[entry.dn.downcase] += 1
  end
  code = ldap.get_operation_result.code
  twice = seen.select { |_, n| n > 1 }.keys
  verdict(code.zero? && seen.size == want && twice.empty?,
          "a paged search returns all #{want} users, each once",
          "result #{result(ldap)}; #{seen.size} distinct of #{want}; #{twice.size} twice")

  # GitLab: Gitlab::Auth::Ldap::Adapter#user, a lookup by uid.
  users = ldap.search(base: PEOPLE, filter: Net::LDAP::Filter.eq("uid", "alice"), attributes: %w[uid mail cn dn])
  verdict(users && users.map { |e| e.dn.downcase } == ["uid=alice,#{PEOPLE}".downcase] &&
          Array(users.first[:mail]) == ["alice@example.com"],
          "GitLab: the user by uid", "got #{users.inspect}; #{result(ldap)}")

  # GitLab's user_filter restricted to a group's members.
  group = "cn=developers,#{GROUPS}"
  filter = Net::LDAP::Filter.join(Net::LDAP::Filter.eq("uid", "*"), Net::LDAP::Filter.construct("(memberOf=#{group})"))
  found = ldap.search(base: PEOPLE, filter: filter, attributes: %w[uid memberOf])
  uids = (found || []).map { |e| Array(e[:uid]).first }.sort
  verdict(uids == %w[alice user00001], "(memberOf=cn=developers,...) finds its members",
          "got #{uids.inspect}; #{result(ldap)}")
  found = ldap.search(base: PEOPLE, filter: Net::LDAP::Filter.construct("(memberOf=cn=platform,#{GROUPS})"), attributes: %w[uid])
  uids = (found || []).map { |e| Array(e[:uid]).first }.sort
  verdict(uids == %w[bob], "(memberOf=cn=platform,...) holds direct members only (bob, not the nested developers)",
          "got #{uids.inspect}; #{result(ldap)}")
  alice = ldap.search(base: "uid=alice,#{PEOPLE}", scope: Net::LDAP::SearchScope_BaseObject, attributes: %w[memberOf])
  groups = alice ? Array(alice.first[:memberof]).map(&:downcase).sort : []
  verdict(groups == ["cn=developers,#{GROUPS}", "cn=employees,#{GROUPS}"].map(&:downcase).sort,
          "alice's memberOf, asked by name, names her direct groups", "got #{groups.inspect}; #{result(ldap)}")
rescue StandardError => e
  verdict(false, "an exception", "#{e.class}: #{e.message}\n#{e.backtrace.first(5).join("\n")}")
end
exit($failed.zero? ? 0 : 1)
