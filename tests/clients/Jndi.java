// Java's JNDI (Debian's default JDK) replaying Keycloak's LDAP federation and Jenkins' LDAP
// plugin query shapes against ferrodir, as run.sh sets it up. jndi.sh compiles and runs it.
//
// Keycloak (org.keycloak.storage.ldap.idm.store.ldap.LDAPOperationManager and friends):
// StartTLS then a simple bind (LDAPContextManager.startTLS), a full-sync paged search with
// the paged-results control marked CRITICAL, entryUUID read as the user id (a string:
// Keycloak lists only objectGUID-style attributes in java.naming.ldap.attributes.binary),
// the user looked up again by that id, group membership by (member=<user dn>), and the
// root DSE's capabilities (LDAPServerCapabilitiesManager).
// Jenkins (hudson.security.LDAPSecurityRealm): the root DSE read with no attribute list
// (inferRootDN), the user by uid={0}, the groups by (| (member={0}) (uniqueMember={0})
// (memberUid={1})).
// Prints a PASS or FAIL line per check; exits 1 if any failed.

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Hashtable;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import javax.naming.Context;
import javax.naming.NamingEnumeration;
import javax.naming.NamingException;
import javax.naming.directory.Attribute;
import javax.naming.directory.Attributes;
import javax.naming.directory.SearchControls;
import javax.naming.directory.SearchResult;
import javax.naming.ldap.Control;
import javax.naming.ldap.InitialLdapContext;
import javax.naming.ldap.LdapContext;
import javax.naming.ldap.PagedResultsControl;
import javax.naming.ldap.PagedResultsResponseControl;
import javax.naming.ldap.StartTlsRequest;
import javax.naming.ldap.StartTlsResponse;

public class Jndi {
    static final String CLIENT = "jndi";
    static final String PAGED = "1.2.840.113556.1.4.319";
    static final String BASE = System.getenv("BASE_DN");
    static final String PEOPLE = "ou=people," + BASE;
    static final String GROUPS = "ou=groups," + BASE;
    static final String ALICE = "uid=alice," + PEOPLE;
    static final int USERS = Integer.parseInt(System.getenv("USERS"));
    static int failed = 0;

    static void verdict(boolean ok, String what, String detail) {
        if (ok) {
            System.out.println("PASS " + CLIENT + ": " + what);
        } else {
            failed++;
            System.out.println("FAIL " + CLIENT + ": " + what);
            if (detail != null && !detail.isEmpty()) {
                for (String line : detail.split("\n", 20)) {
                    System.out.println("    " + line);
                }
            }
        }
        System.out.flush();
    }

    static Hashtable<String, Object> env(boolean bind) {
        Hashtable<String, Object> env = new Hashtable<>();
        env.put(Context.INITIAL_CONTEXT_FACTORY, "com.sun.jndi.ldap.LdapCtxFactory");
        env.put(Context.PROVIDER_URL, System.getenv("LDAP_URI"));
        env.put("com.sun.jndi.ldap.connect.timeout", "10000");
        env.put("com.sun.jndi.ldap.read.timeout", "60000");
        // Keycloak: binary attributes are named; entryUUID is not one of them.
        env.put("java.naming.ldap.attributes.binary", "objectGUID jpegPhoto");
        if (bind) {
            env.put(Context.SECURITY_AUTHENTICATION, "simple");
            env.put(Context.SECURITY_PRINCIPAL, System.getenv("READER_DN"));
            env.put(Context.SECURITY_CREDENTIALS, System.getenv("READER_PW"));
        } else {
            env.put(Context.SECURITY_AUTHENTICATION, "none");
        }
        return env;
    }

    /** Keycloak's LDAPContextManager with "Use StartTLS": connect, StartTLS, then bind. */
    static LdapContext keycloakContext() throws Exception {
        LdapContext ctx = new InitialLdapContext(env(false), null);
        StartTlsResponse tls = (StartTlsResponse) ctx.extendedOperation(new StartTlsRequest());
        tls.negotiate();
        ctx.addToEnvironment(Context.SECURITY_AUTHENTICATION, "simple");
        ctx.addToEnvironment(Context.SECURITY_PRINCIPAL, System.getenv("READER_DN"));
        ctx.addToEnvironment(Context.SECURITY_CREDENTIALS, System.getenv("READER_PW"));
        ctx.lookup(""); // forces the bind, as Keycloak does
        return ctx;
    }

    static String describe(Throwable e) {
        return e.getClass().getName() + ": " + e.getMessage();
    }

    static List<SearchResult> search(LdapContext ctx, String base, String filter, String[] attrs) throws NamingException {
        SearchControls controls = new SearchControls();
        controls.setSearchScope(SearchControls.SUBTREE_SCOPE);
        controls.setReturningAttributes(attrs);
        List<SearchResult> out = new ArrayList<>();
        NamingEnumeration<SearchResult> results = ctx.search(base, filter, controls);
        while (results.hasMore()) {
            out.add(results.next());
        }
        return out;
    }

    static Set<String> names(List<SearchResult> results) {
        Set<String> out = new TreeSet<>();
        for (SearchResult r : results) {
            out.add(r.getNameInNamespace().toLowerCase());
        }
        return out;
    }

    static void keycloak() {
        LdapContext ctx;
        try {
            ctx = keycloakContext();
            verdict(true, "Keycloak: StartTLS, then a simple bind as the reader", null);
        } catch (Exception e) {
            verdict(false, "Keycloak: StartTLS, then a simple bind as the reader", describe(e));
            return;
        }
        try {
            // Full sync: all users, pages of 1000, the control CRITICAL as Keycloak sends it.
            String[] attrs = {"uid", "cn", "sn", "mail", "entryUUID", "createTimestamp", "modifyTimestamp", "objectClass"};
            SearchControls controls = new SearchControls();
            controls.setSearchScope(SearchControls.SUBTREE_SCOPE);
            controls.setReturningAttributes(attrs);
            Map<String, Integer> seen = new HashMap<>();
            int pages = 0;
            byte[] cookie = null;
            do {
                ctx.setRequestControls(new Control[] {new PagedResultsControl(1000, cookie, Control.CRITICAL)});
                NamingEnumeration<SearchResult> results =
                    ctx.search(PEOPLE, "(&(objectclass=inetOrgPerson)(objectclass=organizationalPerson))", controls);
                while (results.hasMore()) {
                    SearchResult r = results.next();
                    String dn = r.getNameInNamespace().toLowerCase();
                    seen.merge(dn, 1, Integer::sum);
                }
                pages++;
                cookie = null;
                Control[] response = ctx.getResponseControls();
                if (response != null) {
                    for (Control c : response) {
                        if (c instanceof PagedResultsResponseControl) {
                            cookie = ((PagedResultsResponseControl) c).getCookie();
                        }
                    }
                }
            } while (cookie != null && cookie.length > 0 && pages < 1000);
            ctx.setRequestControls(null);
            int want = USERS + 2;
            long twice = seen.values().stream().filter(n -> n > 1).count();
            verdict(seen.size() == want && twice == 0 && pages > 1,
                "Keycloak: a critical paged search (pages of 1000) returns all " + want + " users once",
                seen.size() + " distinct of " + want + ", " + twice + " twice, " + pages + " pages");
        } catch (Exception e) {
            verdict(false, "Keycloak: a critical paged search over all users", describe(e));
            try {
                ctx.setRequestControls(null);
            } catch (NamingException ignored) {
                // the next checks say what else is wrong
            }
        }
        try {
            // The user id: entryUUID as a string (not in the binary list), an RFC 4122 UUID,
            // distinct per user; then LDAPOperationManager.lookupById finds the user by it.
            String[] attrs = {"uid", "entryUUID", "createTimestamp", "modifyTimestamp"};
            List<SearchResult> users = search(ctx, PEOPLE, "(|(uid=alice)(uid=bob)(uid=user0000*))", attrs);
            Map<String, String> uuidOf = new HashMap<>();
            String bad = null;
            for (SearchResult r : users) {
                Attribute uuid = r.getAttributes().get("entryUUID");
                Object value = uuid == null ? null : uuid.get();
                try {
                    UUID.fromString((String) value);
                    uuidOf.put(r.getNameInNamespace().toLowerCase(), (String) value);
                } catch (ClassCastException | IllegalArgumentException | NullPointerException e) {
                    bad = r.getNameInNamespace() + ": " + (value == null ? "none" : value.getClass().getName() + " " + value);
                }
            }
            verdict(bad == null && users.size() == 11 && new HashSet<>(uuidOf.values()).size() == 11,
                "Keycloak: entryUUID read as a string user id, an RFC 4122 UUID, distinct per user",
                users.size() + " users, " + new HashSet<>(uuidOf.values()).size() + " distinct ids; bad value: " + bad);
            String id = uuidOf.get(ALICE.toLowerCase());
            List<SearchResult> byId = id == null ? List.of() : search(ctx, PEOPLE, "(&(objectClass=*)(entryUUID=" + id + "))", attrs);
            verdict(names(byId).equals(Set.of(ALICE.toLowerCase())),
                "Keycloak: the user looked up again by its entryUUID", "id " + id + ", got " + names(byId));
        } catch (Exception e) {
            verdict(false, "Keycloak: entryUUID as the user id", describe(e));
        }
        try {
            // group-ldap-mapper, LOAD_GROUPS_BY_MEMBER_ATTRIBUTE
            List<SearchResult> groups = search(ctx, GROUPS, "(&(objectclass=posixGroup)(member=" + ALICE + "))",
                new String[] {"cn", "member", "objectClass"});
            Set<String> cns = new TreeSet<>();
            for (SearchResult r : groups) {
                cns.add(r.getAttributes().get("cn").get().toString());
            }
            verdict(cns.equals(new TreeSet<>(Arrays.asList("developers", "employees"))),
                "Keycloak: (member=<alice's dn>) finds her direct groups", "got " + cns);
        } catch (Exception e) {
            verdict(false, "Keycloak: (member=<dn>)", describe(e));
        }
        try {
            Attributes dse = ctx.getAttributes("", new String[] {"supportedControl", "supportedExtension", "supportedFeatures"});
            Attribute supported = dse.get("supportedControl");
            List<String> oids = new ArrayList<>();
            if (supported != null) {
                NamingEnumeration<?> values = supported.getAll();
                while (values.hasMore()) {
                    oids.add(values.next().toString());
                }
            }
            verdict(oids.contains(PAGED), "Keycloak: the root DSE's supportedControl lists paged results", "supportedControl " + oids);
        } catch (Exception e) {
            verdict(false, "Keycloak: the root DSE's capabilities", describe(e));
        }
        try {
            ctx.close();
        } catch (NamingException ignored) {
            // closing is best effort
        }
    }

    static void jenkins() {
        try {
            // inferRootDN: new InitialDirContext(...).getAttributes(server) - no attribute list.
            LdapContext anonymous = new InitialLdapContext(env(false), null);
            Attributes dse = anonymous.getAttributes("");
            Attribute classes = dse.get("objectClass");
            Attribute contexts = dse.get("namingContexts");
            boolean contextsOk = contexts == null || contexts.contains(BASE);
            verdict(classes != null && contextsOk,
                "Jenkins: the root DSE read with no attribute list",
                "attributes " + dse);
            anonymous.close();
        } catch (Exception e) {
            verdict(false, "Jenkins: the root DSE read with no attribute list", describe(e));
        }
        try {
            LdapContext ctx = new InitialLdapContext(env(true), null);
            List<SearchResult> users = search(ctx, PEOPLE, "uid=alice", null);
            verdict(names(users).equals(Set.of(ALICE.toLowerCase())), "Jenkins: the user by uid={0}", "got " + names(users));
            List<SearchResult> groups = search(ctx, GROUPS,
                "(| (member=" + ALICE + ") (uniqueMember=" + ALICE + ") (memberUid=alice))", new String[] {"cn"});
            Set<String> cns = new TreeSet<>();
            for (SearchResult r : groups) {
                cns.add(r.getAttributes().get("cn").get().toString());
            }
            verdict(cns.equals(new TreeSet<>(Arrays.asList("developers", "employees"))),
                "Jenkins: groups by (| (member={0}) (uniqueMember={0}) (memberUid={1}))", "got " + cns);
            List<SearchResult> group = search(ctx, GROUPS,
                "(& (cn=platform) (| (objectclass=groupOfNames) (objectclass=groupOfUniqueNames) (objectclass=posixGroup)))",
                new String[] {"cn", "member"});
            Attribute members = group.isEmpty() ? null : group.get(0).getAttributes().get("member");
            verdict(group.size() == 1 && members != null && members.size() == 2,
                "Jenkins: a group by its cn with its members", "got " + group);
            ctx.close();
        } catch (Exception e) {
            verdict(false, "Jenkins: user and group searches", describe(e));
        }
    }

    public static void main(String[] args) {
        keycloak();
        jenkins();
        System.exit(failed == 0 ? 0 : 1);
    }
}
