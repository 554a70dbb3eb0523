//! The operational attributes a shard stamps on every write, as slapd publishes them:
//! entryUUID (RFC 4530), entryCSN, createTimestamp, modifyTimestamp, creatorsName and
//! modifiersName (RFC 4512 §3.4).
//!
//! entryCSN comes from the directory's clock (`clock.rs`), stamped when the write is staged
//! into its batch; a shard commits its batches in staging order, so a shard's CSNs rise in
//! commit order.

use ferrodir_proto::entry::{Attribute, Entry};

/// Stored operational attributes (lowercased), in the order slapd lists them.
pub const STORED_OPERATIONAL: &[&str] = &[
    "structuralobjectclass",
    "entryuuid",
    "creatorsname",
    "createtimestamp",
    "entrycsn",
    "modifiersname",
    "modifytimestamp",
];

/// `YYYYMMDDHHMMSS.ffffffZ#000000#SID#000000` of a clock tick and a server id.
pub fn format_csn(micros: u64, sid: u32) -> String {
    let civil = civil_time(micros / 1_000_000);
    format!("{civil}.{:06}Z#000000#{sid:03x}#000000", micros % 1_000_000)
}

/// One write's time and author.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub author: String,
    /// `YYYYMMDDHHMMSSZ` (RFC 4517 §3.3.13).
    pub time: String,
    /// `YYYYMMDDHHMMSS.ffffffZ#000000#SID#000000`, OpenLDAP's CSN form.
    pub csn: String,
    /// The clock tick the CSN names.
    pub micros: u64,
}

/// `YYYYMMDDHHMMSS` of a Unix time (UTC).
pub fn civil_time(seconds: u64) -> String {
    let (year, month, day) = ferrodir_proto::schema::syntax::civil_from_days((seconds / 86_400) as i64);
    let secs_of_day = seconds % 86_400;
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        secs_of_day / 3600,
        (secs_of_day / 60) % 60,
        secs_of_day % 60
    )
}

fn set(entry: &mut Entry, name: &str, value: String) {
    match entry.get_mut(name) {
        Some(attr) => attr.values = vec![value.into_bytes()],
        None => entry.attrs.push(Attribute::new(name, vec![value.into_bytes()])),
    }
}

/// Records the entry's structural object class as the schema check found it (its
/// primary name as the schema spells it), replacing whatever value the entry carried:
/// an Add and an import store the same value (slapd's slapadd refuses a value that differs
/// from the computed one, and the Add path never takes a client's).
pub fn set_structural_class(entry: &mut Entry, class: String) {
    let class = class.into_bytes();
    match entry.get_mut("structuralObjectClass") {
        Some(attr) => attr.values = vec![class],
        None => entry.attrs.insert(0, Attribute::new("structuralObjectClass", vec![class])),
    }
}

/// A fresh random (version 4) entryUUID, from the thread's CSPRNG (rand's `ThreadRng`,
/// seeded from the OS) instead of one getrandom system call per UUID as `Uuid::new_v4`
/// makes: an import stamps every entry (about 2 % of its CPU went to that call).
pub fn new_entry_uuid() -> String {
    let bytes: [u8; 16] = rand::random();
    uuid::Builder::from_random_bytes(bytes).into_uuid().hyphenated().to_string()
}

/// The 16 octets of an entryUUID's text form (RFC 4530: `8-4-4-4-12` hex digits; the uuid
/// crate also takes the plain 32 digits and the braced and `urn:uuid:` forms). None for
/// anything else.
pub fn uuid_octets(text: &[u8]) -> Option<[u8; 16]> {
    uuid::Uuid::try_parse_ascii(text).ok().map(|u| u.into_bytes())
}

/// Stamps a new entry: a fresh entryUUID, and creator and modifier alike.
pub fn stamp_created(entry: &mut Entry, stamp: &Stamp) {
    if entry.get("entryUUID").is_none() {
        set(entry, "entryUUID", new_entry_uuid());
    }
    if entry.get("creatorsName").is_none() {
        set(entry, "creatorsName", stamp.author.clone());
    }
    if entry.get("createTimestamp").is_none() {
        set(entry, "createTimestamp", stamp.time.clone());
    }
    stamp_modified(entry, stamp);
}

/// Stamps an imported entry: keeps whatever operational values the LDIF carried (an export
/// of another server, say) and adds the missing ones.
pub fn stamp_imported(entry: &mut Entry, stamp: &Stamp) {
    let keep_modified =
        ["entryCSN", "modifiersName", "modifyTimestamp"].iter().all(|n| entry.get(n).is_some());
    if keep_modified {
        if entry.get("entryUUID").is_none() {
            set(entry, "entryUUID", new_entry_uuid());
        }
        for (name, value) in [("creatorsName", &stamp.author), ("createTimestamp", &stamp.time)] {
            if entry.get(name).is_none() {
                set(entry, name, value.clone());
            }
        }
    } else {
        stamp_created(entry, stamp);
    }
}

/// Stamps a changed entry.
pub fn stamp_modified(entry: &mut Entry, stamp: &Stamp) {
    set(entry, "entryCSN", stamp.csn.clone());
    set(entry, "modifiersName", stamp.author.clone());
    set(entry, "modifyTimestamp", stamp.time.clone());
}

/// The hidden operational attribute in which a node of a multi-provider mesh keeps, per
/// entry, the CSN of the last change of each attribute it changed and of the entry's name:
/// values `<CSN> <key>`, the key an attribute description in lower case, `@dn` (the last
/// Modify DN) or `@add` (the Add, the CSN of every attribute not listed). A mesh consumer
/// merges two versions of an entry attribute by attribute with it (server
/// `replication::merge`). Never returned by `+`, only when named.
pub const ATTR_CSN_TYPE: &str = "ferrodirattrcsn";
const ATTR_CSN_NAME: &str = "ferrodirAttrCSN";
/// Attributes a change stamps or that name the entry itself: not tracked per attribute
/// (server `replication::merge` takes them by its own rules).
pub const UNTRACKED: &[&str] = &[
    "entrycsn",
    "modifiersname",
    "modifytimestamp",
    "entryuuid",
    "creatorsname",
    "createtimestamp",
    ATTR_CSN_TYPE,
];

/// Records, in `new`, the CSN `csn` for every attribute whose values differ from `old`'s
/// (an Add, `old` None: `@add`), and for the name when `renamed`. A mesh node calls it on
/// each local change (the replication consumer writes the merged values it computed).
pub fn stamp_attribute_csns(old: Option<&Entry>, new: &mut Entry, csn: &str, renamed: bool) {
    let mut map: Vec<(String, String)> = match old {
        Some(old) => attribute_csns(old),
        None => Vec::new(),
    };
    let mut put = |key: String| {
        map.retain(|(k, _)| *k != key);
        map.push((key, csn.to_string()));
    };
    match old {
        None => put("@add".to_string()),
        Some(old) => {
            let values = |entry: &Entry, name: &str| -> Vec<Vec<u8>> {
                let mut v: Vec<Vec<u8>> = entry
                    .attrs
                    .iter()
                    .filter(|a| a.name.eq_ignore_ascii_case(name))
                    .flat_map(|a| a.values.clone())
                    .collect();
                v.sort();
                v
            };
            let mut names: Vec<String> =
                old.attrs.iter().chain(new.attrs.iter()).map(|a| a.name.to_ascii_lowercase()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let base = name.split(';').next().unwrap_or_default();
                if UNTRACKED.contains(&base) {
                    continue;
                }
                if values(old, &name) != values(new, &name) {
                    put(name);
                }
            }
            if renamed {
                put("@dn".to_string());
            }
        }
    }
    set_attribute_csns(new, &map);
}

/// The `(key, CSN)` pairs of an entry's ferrodirAttrCSN.
pub fn attribute_csns(entry: &Entry) -> Vec<(String, String)> {
    entry
        .attrs
        .iter()
        .filter(|a| a.name.eq_ignore_ascii_case(ATTR_CSN_NAME))
        .flat_map(|a| a.values.iter())
        .filter_map(|v| {
            let text = std::str::from_utf8(v).ok()?;
            let (csn, key) = text.split_once(' ')?;
            Some((key.to_string(), csn.to_string()))
        })
        .collect()
}

/// Replaces the entry's ferrodirAttrCSN with `map` (sorted by key).
pub fn set_attribute_csns(entry: &mut Entry, map: &[(String, String)]) {
    entry.attrs.retain(|a| !a.name.eq_ignore_ascii_case(ATTR_CSN_NAME));
    let mut values: Vec<(String, String)> = map.to_vec();
    values.sort();
    if !values.is_empty() {
        entry.attrs.push(Attribute::new(
            ATTR_CSN_NAME,
            values.into_iter().map(|(key, csn)| format!("{csn} {key}").into_bytes()).collect(),
        ));
    }
}

/// The clock tick a CSN names (`YYYYMMDDHHMMSS.ffffffZ#...`, any server id); None when it
/// is not in that form. The inverse of [`format_csn`]'s time part.
pub fn micros_of_csn(csn: &str) -> Option<u64> {
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let text = csn.get(range)?;
        text.bytes().all(|b| b.is_ascii_digit()).then(|| text.parse().ok()).flatten()
    };
    if csn.get(14..15)? != "." || csn.get(21..22)? != "Z" {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hour, minute, second) = (digits(8..10)?, digits(10..12)?, digits(12..14)?);
    let fraction = digits(15..21)?;
    // Days from the civil date (Howard Hinnant's algorithm), the inverse of civil_time's.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(seconds).ok()?.checked_mul(1_000_000)?.checked_add(u64::try_from(fraction).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_csns_follow_what_changed() {
        let mut added = Entry::new(vec![
            Attribute::new("objectClass", vec![b"person".to_vec()]),
            Attribute::new("cn", vec![b"a".to_vec()]),
            Attribute::new("sn", vec![b"b".to_vec()]),
        ]);
        stamp_attribute_csns(None, &mut added, "C1", false);
        assert_eq!(attribute_csns(&added), [("@add".to_string(), "C1".to_string())]);
        let mut next = added.clone();
        next.get_mut("sn").unwrap().values = vec![b"c".to_vec()];
        next.attrs.push(Attribute::new("description", vec![b"d".to_vec()]));
        next.attrs.push(Attribute::new("entryCSN", vec![b"C2".to_vec()]));
        stamp_attribute_csns(Some(&added), &mut next, "C2", false);
        let mut map = attribute_csns(&next);
        map.sort();
        let want: Vec<(String, String)> = [("@add", "C1"), ("description", "C2"), ("sn", "C2")]
            .iter()
            .map(|(k, c)| (k.to_string(), c.to_string()))
            .collect();
        assert_eq!(map, want, "entryCSN is a stamp, not tracked");
        let mut renamed = next.clone();
        stamp_attribute_csns(Some(&next), &mut renamed, "C3", true);
        assert!(attribute_csns(&renamed).contains(&("@dn".to_string(), "C3".to_string())));
        assert!(
            attribute_csns(&renamed).contains(&("sn".to_string(), "C2".to_string())),
            "unchanged keep theirs"
        );
    }

    #[test]
    fn uuid_octets_reads_the_text_form_only() {
        let octets = uuid_octets(b"0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!((octets[0], octets[15]), (0x0f, 0x5b));
        assert_eq!(uuid_octets(b"0F2B9A3E-4C1D-4E5F-8A9B-0C1D2E3F4A5B"), Some(octets));
        assert!(uuid_octets(b"0f2b9a3e").is_none());
        assert!(uuid_octets(b"0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b00").is_none());
        assert!(uuid_octets(b"zz2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b").is_none());
        assert!(uuid_octets(new_entry_uuid().as_bytes()).is_some());
    }

    #[test]
    fn civil_time_known_points() {
        assert_eq!(civil_time(0), "19700101000000");
        assert_eq!(civil_time(951_782_400), "20000229000000");
        assert_eq!(civil_time(1_796_000_000), "20261130005320");
    }

    #[test]
    fn csn_form() {
        assert_eq!(format_csn(1_796_000_000_000_007, 0xabc), "20261130005320.000007Z#000000#abc#000000");
    }

    #[test]
    fn entry_uuids_are_random_version_4() {
        let (a, b) = (new_entry_uuid(), new_entry_uuid());
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
    }

    #[test]
    fn created_entries_get_every_attribute_once() {
        let mut entry = Entry::default();
        let clock = crate::write::clock::Clock::new(0);
        stamp_created(&mut entry, &clock.stamp("cn=admin"));
        stamp_modified(&mut entry, &clock.stamp("cn=other"));
        for name in &STORED_OPERATIONAL[1..] {
            assert_eq!(entry.get(name).map(|a| a.values.len()), Some(1), "{name}");
        }
        assert_eq!(entry.first_str("creatorsName"), Some("cn=admin"));
        assert_eq!(entry.first_str("modifiersName"), Some("cn=other"));
    }

    #[test]
    fn csn_ticks_round_trip() {
        for micros in [0u64, 1_764_547_200_123_456, 951_782_400_000_001, 4_102_444_799_999_999] {
            assert_eq!(micros_of_csn(&format_csn(micros, 7)), Some(micros), "{micros}");
        }
        assert_eq!(micros_of_csn("2026120100000"), None);
        assert_eq!(micros_of_csn("20261201000000.00000xZ#000000#000#000000"), None);
    }
}
