//! The consumer's cookie store: one metadata value per rid on shard 0
//! (`replication.cookie.NNN`), written with `WriteOp::PutMeta` only after every write the
//! cookie covers is acknowledged durable (docs/DECISIONS.md, "Replication consumer: the
//! cookie commits after its data"). So a durable cookie never runs ahead of the data; data
//! durable without its cookie is sent again after a restart and applied as a no-op
//! (entryCSN), so nothing is lost and nothing applied twice. There is one value per rid
//! and one writer (the rid's consumer task), so no sequence number is needed to pick the
//! newest: the shard commits its batches in order.

use ferrodir_proto::message::sync::Cookie;
use ferrodir_router::Worker;
use ferrodir_shard::{ShardCore, WriteOp};

/// The shard that holds every consumer's cookie.
const COOKIE_SHARD: usize = 0;

fn name(rid: u32) -> String {
    format!("replication.cookie.{rid:03}")
}

/// The cookie committed last for `rid`, if any.
pub fn load(view: &ShardCore, rid: u32) -> ferrodir_shard::ShardResult<Option<Vec<u8>>> {
    view.refresh_snapshot()?;
    let value = ferrodir_shard::offline::meta(view.snapshot().as_ref(), &name(rid))?;
    view.release_snapshot();
    Ok(value.filter(|v| !v.is_empty()))
}

/// Commits `cookie` for `rid`; answered once durable. The caller has drained its writes.
pub async fn commit(worker: &Worker, rid: u32, cookie: &[u8]) -> Result<(), ferrodir_router::LdapError> {
    let op = WriteOp::PutMeta { name: name(rid), value: cookie.to_vec() };
    worker.write(COOKIE_SHARD, op).await.map(|_| ())
}

/// The contextCSN values a cookie carries.
pub fn csns(cookie: &[u8]) -> Vec<String> {
    Cookie::parse(cookie).map(|c| c.csns).unwrap_or_default()
}

/// The cookie to send: the stored one's CSNs with this consumer's rid. A read replica
/// sends no sid (ours would make a multi-provider slapd hold back changes it thinks are
/// ours); a mesh node sends its own (`mesh_sid`), which is exactly what the provider must
/// hold back: a change is never sent back to the node it came from.
pub fn outgoing(stored: Option<&[u8]>, rid: u32, mesh_sid: Option<u32>) -> Vec<u8> {
    let mut cookie = stored.and_then(|c| Cookie::parse(c).ok()).unwrap_or_default();
    cookie.rid = Some(rid);
    cookie.sid = mesh_sid;
    cookie.format().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outgoing_cookies_carry_our_rid() {
        let stored = b"rid=007,sid=002,csn=20261201000000.000000Z#000000#002#000000";
        let sent = String::from_utf8(outgoing(Some(stored), 3, None)).unwrap();
        assert_eq!(sent, "rid=003,csn=20261201000000.000000Z#000000#002#000000");
        assert_eq!(String::from_utf8(outgoing(None, 12, None)).unwrap(), "rid=012");
        let mesh = String::from_utf8(outgoing(Some(stored), 3, Some(0x1f))).unwrap();
        assert_eq!(mesh, "rid=003,sid=01f,csn=20261201000000.000000Z#000000#002#000000");
        assert_eq!(csns(stored), vec!["20261201000000.000000Z#000000#002#000000".to_string()]);
    }
}
