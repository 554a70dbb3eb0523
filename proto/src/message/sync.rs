//! RFC 4533 (LDAP Content Synchronization, "syncrepl"): the values of the Sync Request,
//! Sync State and Sync Done controls and of the Sync Info intermediate response, and
//! cookies in OpenLDAP's form (`rid=NNN,sid=SSS,csn=CSN[;CSN...]`).
//!
//! Encoded by hand, as slapd's syncprov writes them (checked against its source,
//! servers/slapd/overlays/syncprov.c, and byte for byte in the tests below): DEFAULT
//! components are left out when they hold their default (refreshDone TRUE, refreshDeletes
//! and reloadHint FALSE). Decoding takes what the rules of the LDAPMessage around it take:
//! definite lengths, primitive OCTET STRINGs, nothing after the value; a BOOLEAN is TRUE
//! for any non-zero octet, as slapd reads it.

/// §2.2 Sync Request control.
pub const SYNC_REQUEST_OID: &str = "1.3.6.1.4.1.4203.1.9.1.1";
/// §2.3 Sync State control.
pub const SYNC_STATE_OID: &str = "1.3.6.1.4.1.4203.1.9.1.2";
/// §2.4 Sync Done control.
pub const SYNC_DONE_OID: &str = "1.3.6.1.4.1.4203.1.9.1.3";
/// §2.5 Sync Info message (the responseName of an IntermediateResponse).
pub const SYNC_INFO_OID: &str = "1.3.6.1.4.1.4203.1.9.1.4";

/// `mode ENUMERATED { refreshOnly (1), refreshAndPersist (3) }`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SyncMode {
    RefreshOnly,
    RefreshAndPersist,
}

/// `syncRequestValue ::= SEQUENCE { mode, cookie syncCookie OPTIONAL, reloadHint BOOLEAN
/// DEFAULT FALSE }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncRequest {
    pub mode: SyncMode,
    pub cookie: Option<Vec<u8>>,
    pub reload_hint: bool,
}

/// `state ENUMERATED { present (0), add (1), modify (2), delete (3) }`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SyncStateKind {
    Present = 0,
    Add = 1,
    Modify = 2,
    Delete = 3,
}

/// `syncStateValue ::= SEQUENCE { state, entryUUID syncUUID, cookie syncCookie OPTIONAL }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncState {
    pub state: SyncStateKind,
    pub entry_uuid: [u8; 16],
    pub cookie: Option<Vec<u8>>,
}

/// `syncDoneValue ::= SEQUENCE { cookie syncCookie OPTIONAL, refreshDeletes BOOLEAN DEFAULT
/// FALSE }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncDone {
    pub cookie: Option<Vec<u8>>,
    pub refresh_deletes: bool,
}

/// `syncInfoValue ::= CHOICE { newcookie [0] syncCookie, refreshDelete [1] SEQUENCE {
/// cookie OPTIONAL, refreshDone BOOLEAN DEFAULT TRUE }, refreshPresent [2] SEQUENCE { same },
/// syncIdSet [3] SEQUENCE { cookie OPTIONAL, refreshDeletes BOOLEAN DEFAULT FALSE, syncUUIDs
/// SET OF syncUUID } }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncInfo {
    NewCookie(Vec<u8>),
    RefreshDelete { cookie: Option<Vec<u8>>, refresh_done: bool },
    RefreshPresent { cookie: Option<Vec<u8>>, refresh_done: bool },
    SyncIdSet { cookie: Option<Vec<u8>>, refresh_deletes: bool, uuids: Vec<[u8; 16]> },
}

impl SyncRequest {
    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        let mut outer = Reader::new(bytes);
        let body = outer.expect(0x30)?;
        outer.end()?;
        let mut r = Reader::new(body);
        let mode = match r.expect(0x0a)? {
            [1] => SyncMode::RefreshOnly,
            [3] => SyncMode::RefreshAndPersist,
            other => return Err(format!("unknown sync mode {other:02x?}")),
        };
        let cookie = r.optional(0x04)?.map(<[u8]>::to_vec);
        let reload_hint = match r.optional(0x01)? {
            Some(v) => boolean(v)?,
            None => false,
        };
        r.end()?;
        Ok(Self { mode, cookie, reload_hint })
    }

    pub fn encode_value(&self) -> Vec<u8> {
        let mode = match self.mode {
            SyncMode::RefreshOnly => 1,
            SyncMode::RefreshAndPersist => 3,
        };
        let mut body = tlv(0x0a, &[mode]);
        if let Some(cookie) = &self.cookie {
            body.extend(tlv(0x04, cookie));
        }
        if self.reload_hint {
            body.extend(tlv(0x01, &[0xff]));
        }
        tlv(0x30, &body)
    }
}

impl SyncState {
    pub fn encode_value(&self) -> Vec<u8> {
        let mut body = tlv(0x0a, &[self.state as u8]);
        body.extend(tlv(0x04, &self.entry_uuid));
        if let Some(cookie) = &self.cookie {
            body.extend(tlv(0x04, cookie));
        }
        tlv(0x30, &body)
    }

    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        let mut outer = Reader::new(bytes);
        let body = outer.expect(0x30)?;
        outer.end()?;
        let mut r = Reader::new(body);
        let state = match r.expect(0x0a)? {
            [0] => SyncStateKind::Present,
            [1] => SyncStateKind::Add,
            [2] => SyncStateKind::Modify,
            [3] => SyncStateKind::Delete,
            other => return Err(format!("unknown sync state {other:02x?}")),
        };
        let entry_uuid = uuid16(r.expect(0x04)?)?;
        let cookie = r.optional(0x04)?.map(<[u8]>::to_vec);
        r.end()?;
        Ok(Self { state, entry_uuid, cookie })
    }
}

impl SyncDone {
    pub fn encode_value(&self) -> Vec<u8> {
        let mut body = Vec::new();
        if let Some(cookie) = &self.cookie {
            body.extend(tlv(0x04, cookie));
        }
        if self.refresh_deletes {
            body.extend(tlv(0x01, &[0xff]));
        }
        tlv(0x30, &body)
    }

    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        let mut outer = Reader::new(bytes);
        let body = outer.expect(0x30)?;
        outer.end()?;
        let mut r = Reader::new(body);
        let cookie = r.optional(0x04)?.map(<[u8]>::to_vec);
        let refresh_deletes = match r.optional(0x01)? {
            Some(v) => boolean(v)?,
            None => false,
        };
        r.end()?;
        Ok(Self { cookie, refresh_deletes })
    }
}

impl SyncInfo {
    pub fn encode_value(&self) -> Vec<u8> {
        match self {
            SyncInfo::NewCookie(cookie) => tlv(0x80, cookie),
            SyncInfo::RefreshDelete { cookie, refresh_done }
            | SyncInfo::RefreshPresent { cookie, refresh_done } => {
                let tag = if matches!(self, SyncInfo::RefreshDelete { .. }) { 0xa1 } else { 0xa2 };
                let mut body = Vec::new();
                if let Some(cookie) = cookie {
                    body.extend(tlv(0x04, cookie));
                }
                if !refresh_done {
                    body.extend(tlv(0x01, &[0x00]));
                }
                tlv(tag, &body)
            }
            SyncInfo::SyncIdSet { cookie, refresh_deletes, uuids } => {
                let mut body = Vec::new();
                if let Some(cookie) = cookie {
                    body.extend(tlv(0x04, cookie));
                }
                if *refresh_deletes {
                    body.extend(tlv(0x01, &[0xff]));
                }
                let set: Vec<u8> = uuids.iter().flat_map(|u| tlv(0x04, u)).collect();
                body.extend(tlv(0x31, &set));
                tlv(0xa3, &body)
            }
        }
    }

    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        let mut outer = Reader::new(bytes);
        let (tag, body) = outer.any()?;
        outer.end()?;
        let mut r = Reader::new(body);
        let info = match tag {
            0x80 => return Ok(SyncInfo::NewCookie(body.to_vec())),
            0xa1 | 0xa2 => {
                let cookie = r.optional(0x04)?.map(<[u8]>::to_vec);
                let refresh_done = match r.optional(0x01)? {
                    Some(v) => boolean(v)?,
                    None => true,
                };
                if tag == 0xa1 {
                    SyncInfo::RefreshDelete { cookie, refresh_done }
                } else {
                    SyncInfo::RefreshPresent { cookie, refresh_done }
                }
            }
            0xa3 => {
                let cookie = r.optional(0x04)?.map(<[u8]>::to_vec);
                let refresh_deletes = match r.optional(0x01)? {
                    Some(v) => boolean(v)?,
                    None => false,
                };
                let mut set = Reader::new(r.expect(0x31)?);
                let mut uuids = Vec::new();
                while !set.rest.is_empty() {
                    uuids.push(uuid16(set.expect(0x04)?)?);
                }
                SyncInfo::SyncIdSet { cookie, refresh_deletes, uuids }
            }
            other => return Err(format!("unknown syncInfoValue choice {other:02x}")),
        };
        r.end()?;
        Ok(info)
    }
}

/// A cookie in OpenLDAP's form: `rid=NNN` (the consumer's replica id, three decimal
/// digits), `sid=SSS` (the sending server's id, three hex digits) and `csn=` one CSN per
/// server id, `;`-separated. Unknown fields and the CSNs of other sids are kept verbatim,
/// so that a cookie of a multi-provider setup comes back as it went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cookie {
    pub rid: Option<u32>,
    pub sid: Option<u32>,
    pub csns: Vec<String>,
    /// Any other `name=value` fields (slapd's `delcsn=`), in order.
    pub other: Vec<String>,
}

impl Cookie {
    /// Parses a cookie; fields it doesn't know are kept. Err names what's malformed.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "cookie is not UTF-8".to_string())?;
        let mut cookie = Cookie::default();
        for field in text.split(',').filter(|f| !f.is_empty()) {
            if let Some(v) = field.strip_prefix("rid=") {
                cookie.rid = Some(v.parse().map_err(|_| format!("bad rid {v:?}"))?);
            } else if let Some(v) = field.strip_prefix("sid=") {
                cookie.sid = Some(u32::from_str_radix(v, 16).map_err(|_| format!("bad sid {v:?}"))?);
            } else if let Some(v) = field.strip_prefix("csn=") {
                cookie.csns = v.split(';').filter(|c| !c.is_empty()).map(str::to_string).collect();
            } else {
                cookie.other.push(field.to_string());
            }
        }
        Ok(cookie)
    }

    /// The CSN of server `sid` (its third `#` field), if the cookie holds one.
    pub fn csn_for(&self, sid: u32) -> Option<&str> {
        self.csns.iter().find(|c| csn_sid(c) == Some(sid)).map(String::as_str)
    }

    /// Replaces (or adds) the CSN of the server the CSN names, keeping the others, sorted by
    /// sid as slapd keeps them.
    pub fn set_csn(&mut self, csn: &str) {
        let sid = csn_sid(csn);
        self.csns.retain(|c| csn_sid(c) != sid);
        self.csns.push(csn.to_string());
        self.csns.sort_by_key(|c| csn_sid(c));
    }

    pub fn format(&self) -> String {
        let mut fields = Vec::new();
        if let Some(rid) = self.rid {
            fields.push(format!("rid={rid:03}"));
        }
        if let Some(sid) = self.sid {
            fields.push(format!("sid={sid:03x}"));
        }
        if !self.csns.is_empty() {
            fields.push(format!("csn={}", self.csns.join(";")));
        }
        fields.extend(self.other.iter().cloned());
        fields.join(",")
    }
}

/// The server id of a CSN (`YYYYmmddHHMMSS.uuuuuuZ#cccccc#SID#mmmmmm`).
pub fn csn_sid(csn: &str) -> Option<u32> {
    u32::from_str_radix(csn.split('#').nth(2)?, 16).ok()
}

fn uuid16(bytes: &[u8]) -> Result<[u8; 16], String> {
    bytes.try_into().map_err(|_| format!("a syncUUID has {} octets, not 16", bytes.len()))
}

fn boolean(v: &[u8]) -> Result<bool, String> {
    match v {
        // As slapd: any non-zero octet is TRUE.
        [b] => Ok(*b != 0),
        _ => Err("a BOOLEAN of more than one octet".to_string()),
    }
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(content);
    out
}

/// A reader of single-octet-tag, definite-length TLVs.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(rest: &'a [u8]) -> Self {
        Self { rest }
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn any(&mut self) -> Result<(u8, &'a [u8]), String> {
        let (&tag, rest) = self.rest.split_first().ok_or("truncated value")?;
        let (&first, mut rest) = rest.split_first().ok_or("truncated length")?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return Err("bad length".to_string());
            }
            let (octets, after) = rest.split_at_checked(n).ok_or("truncated length")?;
            rest = after;
            octets.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
        };
        let (content, rest) = rest.split_at_checked(len).ok_or("truncated value")?;
        self.rest = rest;
        Ok((tag, content))
    }

    fn expect(&mut self, tag: u8) -> Result<&'a [u8], String> {
        match self.any()? {
            (t, content) if t == tag => Ok(content),
            (t, _) => Err(format!("tag {t:02x} where {tag:02x} was expected")),
        }
    }

    fn optional(&mut self, tag: u8) -> Result<Option<&'a [u8]>, String> {
        if self.peek() == Some(tag) {
            self.expect(tag).map(Some)
        } else {
            Ok(None)
        }
    }

    fn end(&self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err("bytes after the value".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_request_as_slapd_sends_it() {
        // slapd's consumer, refreshOnly with a cookie, reloadHint FALSE left out.
        let bytes = [0x30, 0x0a, 0x0a, 0x01, 0x01, 0x04, 0x05, b'r', b'i', b'd', b'=', b'1'];
        let req = SyncRequest::decode_value(&bytes).unwrap();
        assert_eq!(
            req,
            SyncRequest { mode: SyncMode::RefreshOnly, cookie: Some(b"rid=1".to_vec()), reload_hint: false }
        );
        assert_eq!(req.encode_value(), bytes);
        // refreshAndPersist, no cookie, reloadHint TRUE.
        let bytes = [0x30, 0x06, 0x0a, 0x01, 0x03, 0x01, 0x01, 0xff];
        let req = SyncRequest::decode_value(&bytes).unwrap();
        assert_eq!(req.mode, SyncMode::RefreshAndPersist);
        assert!(req.reload_hint && req.cookie.is_none());
        assert_eq!(req.encode_value(), bytes);
        for bad in [
            &[0x30, 0x03, 0x0a, 0x01, 0x02][..],
            &[0x30, 0x03, 0x0a, 0x01],
            &[0x30, 0x03, 0x0a, 0x01, 0x01, 0x00],
            &[0x30, 0x05, 0x0a, 0x01, 0x01, 0x02, 0x00],
            &[],
        ] {
            assert!(SyncRequest::decode_value(bad).is_err(), "{bad:02x?}");
        }
    }

    #[test]
    fn sync_state_and_done() {
        let uuid = [0x11; 16];
        let state = SyncState { state: SyncStateKind::Add, entry_uuid: uuid, cookie: None };
        let mut expected = vec![0x30, 0x15, 0x0a, 0x01, 0x01, 0x04, 0x10];
        expected.extend([0x11; 16]);
        assert_eq!(state.encode_value(), expected);
        assert_eq!(SyncState::decode_value(&expected).unwrap(), state);
        let with_cookie = SyncState { cookie: Some(b"x".to_vec()), state: SyncStateKind::Delete, ..state };
        assert_eq!(SyncState::decode_value(&with_cookie.encode_value()).unwrap(), with_cookie);
        assert!(SyncState::decode_value(&[0x30, 0x06, 0x0a, 0x01, 0x01, 0x04, 0x01, 0x00]).is_err());

        assert_eq!(SyncDone::default().encode_value(), [0x30, 0x00]);
        let done = SyncDone { cookie: Some(b"ab".to_vec()), refresh_deletes: true };
        assert_eq!(done.encode_value(), [0x30, 0x07, 0x04, 0x02, b'a', b'b', 0x01, 0x01, 0xff]);
        assert_eq!(SyncDone::decode_value(&done.encode_value()).unwrap(), done);
    }

    #[test]
    fn sync_info_choices() {
        assert_eq!(SyncInfo::NewCookie(b"c".to_vec()).encode_value(), [0x80, 0x01, b'c']);
        let present = SyncInfo::RefreshPresent { cookie: Some(b"c".to_vec()), refresh_done: true };
        assert_eq!(present.encode_value(), [0xa2, 0x03, 0x04, 0x01, b'c']);
        let delete = SyncInfo::RefreshDelete { cookie: None, refresh_done: false };
        assert_eq!(delete.encode_value(), [0xa1, 0x03, 0x01, 0x01, 0x00]);
        let ids = SyncInfo::SyncIdSet { cookie: None, refresh_deletes: true, uuids: vec![[7; 16]] };
        let mut expected = vec![0xa3, 0x17, 0x01, 0x01, 0xff, 0x31, 0x12, 0x04, 0x10];
        expected.extend([7; 16]);
        assert_eq!(ids.encode_value(), expected);
        for info in [SyncInfo::NewCookie(b"c".to_vec()), present, delete, ids] {
            assert_eq!(SyncInfo::decode_value(&info.encode_value()).unwrap(), info);
        }
        assert!(SyncInfo::decode_value(&[0xa4, 0x00]).is_err());
    }

    #[test]
    fn cookies_in_slapd_form() {
        let text = "rid=001,sid=00a,csn=20261201120000.000001Z#000000#000#000000;20261201120000.000002Z#000000#00a#000000";
        let mut cookie = Cookie::parse(text.as_bytes()).unwrap();
        assert_eq!((cookie.rid, cookie.sid), (Some(1), Some(10)));
        assert_eq!(cookie.csns.len(), 2);
        assert_eq!(cookie.csn_for(10), Some("20261201120000.000002Z#000000#00a#000000"));
        assert_eq!(cookie.format(), text);
        cookie.set_csn("20261201130000.000000Z#000000#000#000000");
        assert_eq!(cookie.csn_for(0), Some("20261201130000.000000Z#000000#000#000000"));
        assert_eq!(cookie.csns.len(), 2);
        assert_eq!(Cookie::parse(b"rid=002").unwrap().format(), "rid=002");
        assert!(Cookie::parse(b"rid=x").is_err());
        assert_eq!(csn_sid("20261201120000.000000Z#000000#fff#000000"), Some(4095));
    }
}
