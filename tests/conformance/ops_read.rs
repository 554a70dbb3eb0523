//! Operations that change nothing, run first on the freshly loaded data: the root DSE and
//! the subschema entry, every scope from many bases, every filter kind, every attribute
//! selection form, limits and controls, compares, binds and extended operations.

use crate::catalogue::*;
use crate::client::{Auth, Control, Request, Scope};

const ALL: &str = "(objectClass=*)";

pub fn add_all(c: &mut Catalogue) {
    root_dse(c);
    scopes(c);
    filters(c);
    attribute_lists(c);
    limits_and_controls(c);
    compares(c);
    binds(c);
    extended(c);
}

fn root_dse(c: &mut Catalogue) {
    let lists: [&[&str]; 12] = [
        &[],
        &["*"],
        &["+"],
        &["namingContexts"],
        &["supportedLDAPVersion"],
        &["subschemaSubentry"],
        &["namingContexts", "supportedLDAPVersion", "subschemaSubentry"],
        &["NAMINGCONTEXTS", "supportedldapversion"],
        &["1.1"],
        &["objectClass"],
        &["*", "+"],
        &["undefinedAttr"],
    ];
    for list in lists {
        c.search("dse", "", Scope::Base, ALL, list);
    }
    c.search("dse", "", Scope::Base, "(supportedLDAPVersion=3)", &["supportedLDAPVersion"]);
    c.search("dse", "", Scope::Base, "(objectClass=top)", &["1.1"]);
    c.search("dse", "", Scope::Base, "(cn=nothing)", &["1.1"]);
    // The subschema subentry (RFC 4512 §4.2).
    for list in
        [&["1.1"][..], &["objectClass"], &["cn"], &["attributeTypes"], &["objectClasses"], &["ldapSyntaxes"]]
    {
        c.search("dse", "cn=Subschema", Scope::Base, "(objectClass=subschema)", list);
    }
    c.search("dse", "cn=Subschema", Scope::Base, ALL, &["matchingRules"]);
    c.search("dse", "cn=Subschema", Scope::One, ALL, &["1.1"]);
    c.search("dse", "cn=Subschema", Scope::Base, ALL, &["matchingRuleUse"]);
}

fn scopes(c: &mut Catalogue) {
    let below_leaf = format!("cn=Child,{BJENSEN}");
    let bases = [
        SUFFIX,
        PEOPLE,
        GROUPS,
        BJENSEN,
        MANAGER_DN,
        "ou=Nowhere,dc=example,dc=com",
        "cn=x,ou=Nowhere,ou=People,dc=example,dc=com",
        below_leaf.as_str(),
        "dc=example,dc=org",
        "o=Other",
        "dc=com",
        "DC=EXAMPLE, DC=COM",
        "ou=people , dc=example,dc=com",
        "not a dn",
        "",
    ];
    for base in bases {
        for scope in [Scope::Base, Scope::One, Scope::Sub] {
            c.search("scope", base, scope, ALL, &["1.1"]);
        }
    }
    for (base, scope) in
        [(SUFFIX, Scope::One), (PEOPLE, Scope::One), (GROUPS, Scope::Sub), (ALUMNI, Scope::One)]
    {
        c.search("scope", base, scope, ALL, &["*"]);
    }
    // OpenLDAP's subordinate subtree (scope 3), appended so the ids above keep their numbers.
    for base in bases {
        c.search("scope", base, Scope::Children, ALL, &["1.1"]);
    }
}

/// Every filter kind (RFC 4511 §4.5.1.7, RFC 4515, RFC 4526), with case and spacing
/// variants, syntaxes with their own matching rules (telephone numbers, integers, DNs,
/// times), attributes the schema lacks, supertypes (`name`) and operational attributes.
const FILTERS: &[&str] = &[
    // equality
    "(cn=Barbara Jensen)",
    "(cn=barbara jensen)",
    "(CN=BARBARA JENSEN)",
    "(cn=  Barbara   Jensen  )",
    "(commonName=Barbara Jensen)",
    "(2.5.4.3=Barbara Jensen)",
    "(sn=Jensen)",
    "(sn=jENSEN)",
    "(sn= Jensen )",
    "(uid=bjensen)",
    "(uid=BJENSEN)",
    "(mail=bjensen@mailgw.example.com)",
    "(mail=BJENSEN@MAILGW.EXAMPLE.COM)",
    "(telephoneNumber=+1 313 555 9022)",
    "(telephoneNumber=+13135559022)",
    "(telephoneNumber=+1-313-555-9022)",
    "(homePhone=+1 313 555 2333)",
    "(facsimileTelephoneNumber=+1 313 555 2274)",
    "(objectClass=person)",
    "(objectClass=PERSON)",
    "(objectClass=2.5.6.6)",
    "(objectclass=inetOrgPerson)",
    "(objectClass=OPENLDAPPERSON)",
    "(objectClass=top)",
    "(objectClass=groupOfNames)",
    "(objectClass=extensibleObject)",
    "(objectClass=organization)",
    "(objectClass=noSuchClass)",
    "(member=cn=Manager,dc=example,dc=com)",
    "(member=CN=manager, DC=example,DC=com)",
    "(member=cn=Nobody,dc=example,dc=com)",
    "(member=not a dn)",
    "(uniqueMember=cn=Bjorn Jensen,ou=Information Technology Division,ou=People,dc=example,dc=com)",
    "(seeAlso=cn=All Staff,ou=Groups,dc=example,dc=com)",
    "(owner=cn=manager,dc=example,dc=com)",
    "(uidNumber=0)",
    "(uidNumber=00)",
    "(uidNumber=abc)",
    "(gidNumber=0)",
    "(description=Very tall)",
    "(description=very TALL)",
    "(postalAddress=Alumni Association $ 111 Maple St $ Anytown, MI 48109)",
    "(postalAddress=alumni association$111 maple st$anytown, mi 48109)",
    "(dc=example)",
    "(o=Ex.)",
    "(l=Anytown, Michigan)",
    "(st=michigan)",
    "(associatedDomain=EXAMPLE.COM)",
    "(title=Mythical Manager, Research Systems)",
    "(drink=water)",
    "(cn=)",
    "(userPassword=bjensen)",
    "(name=Barbara Jensen)",
    "(name=People)",
    "(name=jensen)",
    "(undefinedAttr=foo)",
    "(cn;lang-en=Barbara Jensen)",
    "(entryDN=cn=John Doe,ou=Information Technology Division,ou=People,dc=example,dc=com)",
    "(hasSubordinates=TRUE)",
    "(hasSubordinates=FALSE)",
    "(structuralObjectClass=organizationalUnit)",
    "(creatorsName=cn=Manager,dc=example,dc=com)",
    // presence
    "(cn=*)",
    "(objectClass=*)",
    "(OBJECTCLASS=*)",
    "(2.5.4.3=*)",
    "(userPassword=*)",
    "(uidNumber=*)",
    "(description=*)",
    "(telephoneNumber=*)",
    "(member=*)",
    "(seeAlso=*)",
    "(drink=*)",
    "(name=*)",
    "(undefinedAttr=*)",
    "(cn;lang-en=*)",
    "(entryUUID=*)",
    "(createTimestamp=*)",
    "(modifiersName=*)",
    "(hasSubordinates=*)",
    "(entryDN=*)",
    "(structuralObjectClass=*)",
    "(subschemaSubentry=*)",
    // substrings
    "(cn=Barb*)",
    "(cn=*Jensen)",
    "(cn=*ens*)",
    "(cn=B*J*n)",
    "(cn=b*JENSEN)",
    "(cn=J*n*s*)",
    "(cn=J**s*)",
    "(cn=Ja* A *1)",
    "(cn=Barbara  J*)",
    "(sn=*ens*)",
    "(sn=Jen*)",
    "(uid=*o*)",
    "(mail=*@mail.alumni.example.com)",
    "(telephoneNumber=+1 313 555 9*)",
    "(telephoneNumber=*5559022)",
    "(telephoneNumber=+1313555*)",
    "(description=*very*)",
    "(postalAddress=*Maple*)",
    "(o=Ex*)",
    "(ou=*Division)",
    "(dc=ex*)",
    "(associatedDomain=*.com)",
    "(uidNumber=0*)",
    "(objectClass=*person)",
    "(member=cn=Manager*)",
    "(name=Bar*)",
    "(undefinedAttr=a*)",
    // ordering
    "(uidNumber>=0)",
    "(uidNumber<=0)",
    "(uidNumber>=1)",
    "(gidNumber<=-1)",
    "(uidNumber>=abc)",
    "(cn>=M)",
    "(sn<=M)",
    "(mail>=a)",
    "(telephoneNumber>=+1 313 555 5000)",
    "(createTimestamp>=19700101000000Z)",
    "(createTimestamp<=19700101000000Z)",
    "(modifyTimestamp>=20000101000000Z)",
    "(createTimestamp>=20990101000000Z)",
    "(createTimestamp>=yesterday)",
    "(testTime>=20000101000000Z)",
    "(undefinedAttr>=a)",
    // approximate (RFC 4511 §4.5.1.7.6: the algorithm is the server's)
    "(sn~=jENSEN)",
    "(cn~=Jensen)",
    "(cn~=Barbra Jensen)",
    "(cn~=jon doe)",
    "(uid~=bjensen)",
    "(uidNumber~=0)",
    "(undefinedAttr~=x)",
    // extensible match (RFC 4511 §4.5.1.7.7)
    "(cn:caseExactMatch:=Barbara Jensen)",
    "(cn:caseExactMatch:=barbara jensen)",
    "(cn:2.5.13.5:=Barbara Jensen)",
    "(cn:=Barbara Jensen)",
    "(ou:dn:=People)",
    "(ou:dn:caseIgnoreMatch:=people)",
    "(:dn:caseIgnoreMatch:=alumni association)",
    "(:caseExactMatch:=Barbara Jensen)",
    "(dc:dn:=example)",
    "(cn:dn:=Manager)",
    "(uidNumber:integerMatch:=0)",
    "(uidNumber:2.5.13.14:=0)",
    "(uidNumber:integerOrderingMatch:=1)",
    "(member:distinguishedNameMatch:=cn=Manager,dc=example,dc=com)",
    "(objectClass:objectIdentifierMatch:=person)",
    "(cn:unknownRule:=x)",
    "(cn:1.2.3.4.5:=x)",
    "(undefinedAttr:caseExactMatch:=x)",
    // and, or, not; absolute true and false (RFC 4526)
    "(&(objectClass=person)(sn=Doe))",
    "(|(sn=Doe)(sn=Jensen))",
    "(!(objectClass=person))",
    "(&(objectClass=*)(!(cn=*)))",
    "(&)",
    "(|)",
    "(!(&))",
    "(!(|))",
    "(&(&)(cn=John Doe))",
    "(|(|)(cn=John Doe))",
    "(&(|(sn=Doe)(sn=Smith))(!(cn=John*)))",
    "(!(!(cn=John Doe)))",
    "(!(undefinedAttr=x))",
    "(|(undefinedAttr=x)(cn=John Doe))",
    "(&(undefinedAttr=x)(cn=John Doe))",
    "(!(uidNumber=abc))",
    "(&(objectClass=organizationalUnit)(ou=*))",
    "(|(givenname=Xx*yY*Z)(cn=)(undef=*)(objectclass=groupofnames)(sn=jones)\
     (member=cn=Manager,dc=example,dc=com)(uniqueMember=cn=Manager,dc=example,dc=com))",
    "(&(objectclass=groupofnames)(cn=A*)(member=cn=Mark Elliot,ou=Alumni Association,ou=People,dc=example,dc=com))",
    "(!(objectclass=pilotPerson))",
    "(&(objectClass=inetorgperson)(userid=uham))",
];

fn filters(c: &mut Catalogue) {
    for filter in FILTERS {
        c.search("filter", SUFFIX, Scope::Sub, filter, &["1.1"]);
    }
    // A few again from other bases and scopes, where candidates come from elsewhere.
    for filter in ["(cn=*Jensen)", "(objectClass=person)", "(ou:dn:=People)", "(uidNumber>=0)", "(!(cn=*))"] {
        c.search("filter", PEOPLE, Scope::One, filter, &["1.1"]);
        c.search("filter", BJENSEN, Scope::Base, filter, &["1.1"]);
    }
    // memberOf (slapd with its memberof overlay) and the bit rules.
    let member_of = [
        "(memberOf=cn=All Staff,ou=Groups,dc=example,dc=com)",
        "(memberOf=CN=ALL STAFF, OU=Groups,DC=example,DC=com)",
        "(&(objectClass=person)(memberOf=cn=ITD Staff,ou=Groups,dc=example,dc=com))",
        "(|(memberOf=cn=Alumni Assoc Staff,ou=Groups,dc=example,dc=com)(cn=Barbara Jensen))",
        "(!(memberOf=cn=All Staff,ou=Groups,dc=example,dc=com))",
        "(memberOf=*)",
        "(memberOf=cn=nobody,dc=example,dc=com)",
        "(uidNumber:1.2.840.113556.1.4.803:=2)",
        "(uidNumber:1.2.840.113556.1.4.804:=3)",
        "(uidNumber:integerBitAndMatch:=0)",
    ];
    for filter in member_of {
        c.search("filter", SUFFIX, Scope::Sub, filter, &["1.1"]);
    }
    c.search("filter", SUFFIX, Scope::Sub, "(objectClass=person)", &["memberOf"]);
}

/// Attribute selection (RFC 4511 §4.5.1.8; RFC 3673 `+`; RFC 4529 `@class`).
const ATTRIBUTE_LISTS: &[&[&str]] = &[
    &[],
    &["*"],
    &["+"],
    &["*", "+"],
    &["1.1"],
    &["1.1", "cn"],
    &["*", "1.1"],
    &["cn"],
    &["CN"],
    &["commonName"],
    &["2.5.4.3"],
    &["cn", "sn", "uid"],
    &["cn", "CN"],
    &["name"],
    &["objectClass"],
    &["description"],
    &["uidNumber"],
    &["userPassword"],
    &["@OpenLDAPperson"],
    &["@person"],
    &["@organizationalUnit"],
    &["undefinedAttr"],
    &["cn", "undefinedAttr"],
    &["cn;lang-en"],
    &["cn;binary"],
    &["bad attr!"],
    &["entryUUID"],
    &["createTimestamp"],
    &["entryDN"],
    &["structuralObjectClass"],
    &["hasSubordinates"],
    &["subschemaSubentry"],
    &["creatorsName", "modifiersName"],
    &["*", "entryDN"],
    &["+", "cn"],
];

fn attribute_lists(c: &mut Catalogue) {
    for list in ATTRIBUTE_LISTS {
        c.search("attrs", BJENSEN, Scope::Base, "(objectClass=*)", list);
        c.search("attrs", PEOPLE, Scope::Base, "(objectClass=*)", list);
    }
    for list in [&[][..], &["cn", "member"], &["+"], &["@groupOfNames"], &["owner"]] {
        c.search("attrs", GROUPS, Scope::One, ALL, list);
    }
    for list in [&[][..], &["cn"], &["+"], &["*", "+"], &["1.1"]] {
        c.search_full("attrs", Who::Anonymous, BJENSEN, Scope::Base, ALL, list, 0, true, vec![]);
    }
    c.search_full("attrs", Who::Anonymous, SUFFIX, Scope::Sub, ALL, &["objectClass"], 0, true, vec![]);
    // The same entry read by each identity: open-read shows everything to everyone.
    for who in [Who::Manager, Who::User(BJENSEN, BJENSEN_PW)] {
        c.search_full("attrs", who, BJENSEN, Scope::Base, ALL, &["*"], 0, false, vec![]);
        c.search_full(
            "attrs",
            who,
            SUFFIX,
            Scope::Sub,
            "(userPassword=*)",
            &["userPassword"],
            0,
            false,
            vec![],
        );
    }
}

fn limits_and_controls(c: &mut Catalogue) {
    for limit in [1, 2, 18, 19, 20, 100] {
        c.search_full("limit", Who::Anonymous, SUFFIX, Scope::Sub, ALL, &["1.1"], limit, false, vec![]);
    }
    c.search_full("limit", Who::Anonymous, SUFFIX, Scope::Sub, "(cn=John Doe)", &["1.1"], 1, false, vec![]);
    c.search_full("limit", Who::Anonymous, PEOPLE, Scope::One, ALL, &["1.1"], 1, false, vec![]);
    c.search_full("limit", Who::Anonymous, BJENSEN, Scope::Base, ALL, &["1.1"], 1, false, vec![]);
    c.search_full("limit", Who::Manager, SUFFIX, Scope::Sub, ALL, &["1.1"], 3, false, vec![]);
    c.search_full("limit", Who::Anonymous, SUFFIX, Scope::Sub, "(cn=Nobody)", &["1.1"], 1, false, vec![]);
    let control = |oid: &str, critical: bool| Control { oid: oid.into(), critical, value: None };
    let controls = [
        // ManageDsaIT (RFC 3296), as OpenLDAP's test003 sends it (ldapsearch -M).
        control("2.16.840.1.113730.3.4.2", false),
        control("2.16.840.1.113730.3.4.2", true),
        // Unknown controls: ignored unless critical (RFC 4511 §4.1.11).
        control("1.2.3.4.5.6", false),
        control("1.2.3.4.5.6", true),
    ];
    for control in controls {
        c.search_full(
            "limit",
            Who::Anonymous,
            SUFFIX,
            Scope::Sub,
            "(uid=uham)",
            &["uid"],
            0,
            false,
            vec![control],
        );
    }
}

fn compares(c: &mut Catalogue) {
    let anon = Who::Anonymous;
    let cases: [(&str, &str, &str); 28] = [
        (BJENSEN, "cn", "Barbara Jensen"),
        (BJENSEN, "cn", "barbara  JENSEN"),
        (BJENSEN, "cn", "Nobody"),
        (BJENSEN, "CommonName", "Babs Jensen"),
        (BJENSEN, "2.5.4.3", "Babs Jensen"),
        (BJENSEN, "name", "Babs Jensen"),
        (BJENSEN, "sn", "Jensen"),
        (BJENSEN, "uidNumber", "0"),
        (BJENSEN, "undefinedAttr", "x"),
        (BJENSEN, "objectClass", "person"),
        (BJENSEN, "objectClass", "inetOrgPerson"),
        (BJENSEN, "objectClass", "groupOfNames"),
        (BJENSEN, "objectClass", "noSuchClass"),
        (BJENSEN, "userPassword", "bjensen"),
        (BJENSEN, "userPassword", "wrong"),
        (BJENSEN, "telephoneNumber", "+13135559022"),
        (BJENSEN, "facsimileTelephoneNumber", "+1 313 555 2274"),
        (
            BJENSEN,
            "postalAddress",
            "itd prod dev & deployment $ 535 W. William St. Room 4212 $ Anytown, MI 48103-4943",
        ),
        (BJENSEN, "entryDN", BJENSEN),
        (BJENSEN, "hasSubordinates", "FALSE"),
        (BJENSEN, "cn;lang-en", "Barbara Jensen"),
        (PEOPLE, "uidNumber", "0"),
        (PEOPLE, "uidNumber", "00"),
        (PEOPLE, "uidNumber", "abc"),
        (ALL_STAFF, "member", "cn=manager, dc=example,dc=com"),
        (ITD_STAFF, "uniqueMember", BJORN),
        ("cn=Nobody,ou=People,dc=example,dc=com", "cn", "Nobody"),
        ("cn=Nobody,dc=example,dc=org", "cn", "Nobody"),
    ];
    for (dn, attr, value) in cases {
        c.compare(anon, dn, attr, value);
    }
    c.compare(anon, "", "supportedLDAPVersion", "3");
    c.compare(anon, "not a dn", "cn", "x");
    c.compare(Who::Manager, BJENSEN, "cn", "Babs Jensen");
    c.compare(Who::User(BJORN, BJORN_PW), BJENSEN, "userPassword", "bjensen");
}

fn binds(c: &mut Catalogue) {
    let cases: [(&str, &str); 18] = [
        (MANAGER_DN, MANAGER_PW),
        (MANAGER_DN, "wrong"),
        ("CN=manager, DC=Example,dc=COM", MANAGER_PW),
        (BJENSEN, BJENSEN_PW),
        (BJENSEN, "wrong"),
        (BJENSEN, "BJENSEN"),
        (BJORN, BJORN_PW),
        (JAJ, JAJ_PW),
        (JAJ, "jaj "),
        (JOHN, "anything"),
        ("cn=Nobody,dc=example,dc=com", "secret"),
        ("cn=Nobody,dc=example,dc=org", "secret"),
        (BJENSEN, ""),
        ("cn=Nobody,dc=example,dc=com", ""),
        ("", ""),
        ("", "secret"),
        ("not a dn", "secret"),
        ("cn=Barbara Jensen,ou=information technology division,ou=people,dc=example,dc=com", BJENSEN_PW),
    ];
    for (dn, password) in cases {
        c.bind(dn, password);
    }
    let odd = [
        Request::Bind { version: 2, dn: MANAGER_DN.into(), auth: Auth::Simple(MANAGER_PW.into()) },
        Request::Bind { version: 4, dn: MANAGER_DN.into(), auth: Auth::Simple(MANAGER_PW.into()) },
        Request::Bind { version: 3, dn: "".into(), auth: Auth::Sasl("NO-SUCH-MECHANISM".into()) },
    ];
    for request in odd {
        c.push("bind", Who::Anonymous, request);
    }
}

fn extended(c: &mut Catalogue) {
    let who_am_i = || Request::Extended { oid: "1.3.6.1.4.1.4203.1.11.3".into(), value: None };
    for who in [Who::Anonymous, Who::Manager, Who::User(BJENSEN, BJENSEN_PW)] {
        c.push("ext", who, who_am_i());
    }
    c.push("ext", Who::Anonymous, Request::Extended { oid: "1.2.3.4.5.6".into(), value: None });
}
