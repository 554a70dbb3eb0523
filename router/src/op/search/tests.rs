//! Search through a whole session over two shards: scopes, the size limit, and what the
//! access rules hide, driven through the pipeline's entry point as a client would.

use ferrodir_proto::message::SearchScope;
use ferrodir_proto::ResultCode;

use crate::testkit::{run, search_request, TestDirectory, ROOT_DN, ROOT_PASSWORD, SUFFIX, USER_PASSWORD};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

fn sorted(mut dns: Vec<String>) -> Vec<String> {
    dns.sort();
    dns
}

#[test]
fn each_scope_returns_its_entries() {
    run(async {
        let directory = TestDirectory::with_people(2).await;
        let mut client = directory.connect();
        let base = client.search(PEOPLE, SearchScope::BaseObject, "(objectClass=*)", &[]).await;
        assert_eq!(base.result.result_code, ResultCode::SUCCESS);
        assert_eq!(base.dns(), vec![PEOPLE]);

        let one = client.search(PEOPLE, SearchScope::SingleLevel, "(objectClass=*)", &[]).await;
        assert_eq!(sorted(one.dns()), vec![ALICE, BOB]);

        let sub = client.search(SUFFIX, SearchScope::WholeSubtree, "(objectClass=*)", &[]).await;
        assert_eq!(sorted(sub.dns()), sorted(vec![SUFFIX.into(), PEOPLE.into(), ALICE.into(), BOB.into()]));

        let filtered = client.search(SUFFIX, SearchScope::WholeSubtree, "(uid=bob)", &["cn"]).await;
        assert_eq!(filtered.dns(), vec![BOB]);
        assert_eq!(filtered.values(BOB, "cn"), vec!["Bob Builder"]);
        assert!(filtered.values(BOB, "sn").is_empty(), "only the attributes asked for");
    });
}

#[test]
fn a_missing_base_is_no_such_object_with_the_matched_dn() {
    run(async {
        let directory = TestDirectory::with_people(2).await;
        let mut client = directory.connect();
        let missing = "uid=carol,ou=people,dc=example,dc=com";
        let found = client.search(missing, SearchScope::BaseObject, "(objectClass=*)", &[]).await;
        assert_eq!(found.result.result_code, ResultCode::NO_SUCH_OBJECT);
        assert_eq!(found.result.matched_dn.as_ref(), PEOPLE.as_bytes());
        assert!(found.entries.is_empty());
    });
}

#[test]
fn the_size_limit_stops_the_search_with_size_limit_exceeded() {
    run(async {
        let directory = TestDirectory::with_people(2).await;
        let mut client = directory.connect();
        let mut request = search_request(SUFFIX, SearchScope::WholeSubtree, "(objectClass=*)", &[]);
        request.size_limit = 1;
        let found = client.search_request(request).await;
        assert_eq!(found.result.result_code, ResultCode::SIZE_LIMIT_EXCEEDED);
        assert_eq!(found.entries.len(), 1);

        let mut request = search_request(SUFFIX, SearchScope::WholeSubtree, "(objectClass=*)", &[]);
        request.size_limit = 4;
        let found = client.search_request(request).await;
        assert_eq!(found.result.result_code, ResultCode::SUCCESS, "exactly the limit is no excess");
        assert_eq!(found.entries.len(), 4);
    });
}

#[test]
fn user_password_is_hidden_from_anonymous_and_shown_to_its_owner_and_the_root_dn() {
    run(async {
        let directory = TestDirectory::with_people(2).await;
        let mut anonymous = directory.connect();
        let found = anonymous.search(ALICE, SearchScope::BaseObject, "(objectClass=*)", &["*"]).await;
        assert_eq!(found.dns(), vec![ALICE]);
        assert_eq!(found.values(ALICE, "uid"), vec!["alice"]);
        assert!(found.values(ALICE, "userPassword").is_empty(), "anonymous has only auth on it");
        // Nor can anonymous find an entry by its password.
        let probe = format!("(userPassword={USER_PASSWORD})");
        let found = anonymous.search(SUFFIX, SearchScope::WholeSubtree, &probe, &[]).await;
        assert!(found.entries.is_empty());

        let mut alice = directory.connect();
        assert_eq!(alice.bind(ALICE, USER_PASSWORD).await, ResultCode::SUCCESS);
        let found = alice.search(ALICE, SearchScope::BaseObject, "(objectClass=*)", &["userPassword"]).await;
        assert_eq!(found.values(ALICE, "userPassword"), vec![USER_PASSWORD]);
        let found = alice.search(BOB, SearchScope::BaseObject, "(objectClass=*)", &["userPassword"]).await;
        assert!(found.values(BOB, "userPassword").is_empty(), "not another's");

        let mut root = directory.connect();
        assert_eq!(root.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
        let found = root.search(BOB, SearchScope::BaseObject, "(objectClass=*)", &["userPassword"]).await;
        assert_eq!(found.values(BOB, "userPassword"), vec![USER_PASSWORD]);
    });
}

/// `(member=<DN>)` answered from the member index (issue #28's login storm): a group
/// whose value names the user in another spelling matches, a group naming someone else
/// doesn't, and a group whose member the requester may not search stays out although its
/// posting names the user (the index alone would let it in).
#[test]
fn member_equality_from_the_index_matches_spellings_and_honours_unsearchable_members() {
    use crate::acl::parse::{compile, profile, RuleText};
    const GROUPS: &str = "ou=groups,dc=example,dc=com";
    let both = "cn=both,ou=groups,dc=example,dc=com";
    let only_bob = "cn=only-bob,ou=groups,dc=example,dc=com";
    let secret = "cn=secret,ou=groups,dc=example,dc=com";
    run(async {
        let directory = TestDirectory::with_people_configured(2, |config| {
            let mut rules = vec![RuleText::new(&format!("dn.base={secret} attrs=member"), &["* none"])];
            rules.extend(profile("default").expect("the default rules"));
            config.access_rules =
                std::sync::Arc::new(compile(&rules, config.rules.clone(), "test").expect("access rules"));
        })
        .await;
        let mut root = directory.connect();
        assert_eq!(root.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
        let groups: [(&str, &[&str]); 4] = [
            (GROUPS, &[]),
            (both, &["UID=Alice, OU=People,DC=Example,DC=COM", BOB]),
            (only_bob, &[BOB]),
            (secret, &[ALICE]),
        ];
        for (dn, members) in groups {
            let result = if members.is_empty() {
                root.add(dn, &[("objectClass", &["organizationalUnit"]), ("ou", &["groups"])]).await
            } else {
                let cn = dn.split(',').next().unwrap().trim_start_matches("cn=");
                root.add(dn, &[("objectClass", &["groupOfNames"]), ("cn", &[cn]), ("member", members)]).await
            };
            assert_eq!(result.result_code, ResultCode::SUCCESS, "adding {dn}: {result:?}");
        }
        let filter = format!("(member={ALICE})");
        let as_root = root.search(SUFFIX, SearchScope::WholeSubtree, &filter, &["cn"]).await;
        assert_eq!(sorted(as_root.dns()), vec![both.to_string(), secret.to_string()]);

        let mut anonymous = directory.connect();
        let found = anonymous.search(SUFFIX, SearchScope::WholeSubtree, &filter, &["cn"]).await;
        assert_eq!(found.result.result_code, ResultCode::SUCCESS);
        assert_eq!(found.dns(), vec![both], "secret's member is not searchable by anonymous");
        let odd = "(member=uid=BOB,ou=people, dc=example,dc=com)";
        let found = anonymous.search(SUFFIX, SearchScope::WholeSubtree, odd, &["cn"]).await;
        assert_eq!(sorted(found.dns()), vec![both.to_string(), only_bob.to_string()]);
        let nobody = anonymous
            .search(
                SUFFIX,
                SearchScope::WholeSubtree,
                "(member=uid=carol,ou=people,dc=example,dc=com)",
                &["cn"],
            )
            .await;
        assert!(nobody.dns().is_empty());
    });
}
