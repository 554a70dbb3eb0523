//! `ferrodir export`: every entry as LDIF, parents first, so that both `ferrodir import`
//! and slapadd can load the file.

use std::io::Write;

use ferrodir_proto::ldif::write_entry;
use ferrodir_shard::keys;
use ferrodir_shard::record::EntryRecord;
use ferrodir_shard::EntryId;

use crate::config::Config;
use crate::store::Store;

pub fn export(store: &Store, config: &Config, out: &mut impl Write) -> anyhow::Result<usize> {
    let tree = store.skeleton(config)?;
    let mut entries: Vec<(usize, String, EntryRecord)> = Vec::new();
    for (index, engine) in store.engines.iter().enumerate() {
        let snapshot = engine.snapshot()?;
        let mut failure = None;
        snapshot.scan_prefix(
            &keys::entries_prefix(),
            &mut |key, value| match EntryRecord::decode(value) {
                Ok(record) => {
                    let dn = tree.dn_of_child(record.parent, &record.rdn);
                    entries.push((depth(&tree, record.parent), dn, record));
                    true
                }
                Err(e) => {
                    failure = Some(anyhow::anyhow!("shard {index}, entry {:?}: {e}", keys::trailing_id(key)));
                    false
                }
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    for (_, dn, record) in &entries {
        write_entry(out, dn, &record.entry.attrs)?;
    }
    out.flush()?;
    Ok(entries.len())
}

fn depth(tree: &ferrodir_shard::skeleton::Skeleton, mut parent: EntryId) -> usize {
    let mut depth = 0;
    while parent != EntryId::ROOT && depth < 1024 {
        depth += 1;
        parent = tree.get(parent).map(|n| n.parent).unwrap_or(EntryId::ROOT);
    }
    depth
}
