//! `ferrodir export`: every entry as LDIF, parents first, so that both `ferrodir import`
//! and slapadd can load the file. It reads a [`Cut`]: the data directory itself when no
//! server holds it, or a serving server's consistent cut (taken through the admin socket).
//!
//! Order: by depth, then by DN text. Depth first is what makes parents come first across
//! shards; the DN tie-break keeps the output the same from one run to the next.

use std::io::Write;

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::write_entry;
use ferrodir_shard::offline::{self, Stored};
use ferrodir_shard::{EntryId, EntryRecord, RuleTable, Skeleton};

use crate::data::cut::Cut;

/// What goes into the LDIF.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// The stored operational attributes (entryUUID, entryCSN, creatorsName, timestamps,
    /// structuralObjectClass). On by default, as in slapcat: an import keeps them, so the
    /// entries keep their identity and history. Off gives user attributes only; an import
    /// then stamps new ones.
    pub operational: bool,
}

/// Writes every entry of `cut`; returns how many.
pub fn export(
    cut: &Cut,
    rules: &RuleTable,
    options: ExportOptions,
    out: &mut impl Write,
) -> anyhow::Result<usize> {
    let records = read_records(cut)?;
    let (tree, orphans) = Skeleton::build(
        1,
        records
            .iter()
            .filter(|(_, r)| r.is_container())
            .map(|(id, r)| (*id, r.parent, r.rdn.clone(), r.rdn_norm.clone())),
    );
    if !orphans.is_empty() {
        tracing::warn!(count = orphans.len(), "containers whose parent chain is broken; run ferrodir verify");
    }
    let mut entries: Vec<(usize, String, EntryRecord)> = records
        .into_iter()
        .map(|(_, record)| {
            (depth(&tree, record.parent), tree.dn_of_child(record.parent, &record.rdn), record)
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    for (_, dn, record) in &entries {
        if options.operational {
            write_entry(out, dn, &record.entry.attrs)?;
        } else {
            let user: Vec<Attribute> = record
                .entry
                .attrs
                .iter()
                .filter(|attr| !rules.get(&attr.name).is_some_and(|r| r.operational))
                .cloned()
                .collect();
            write_entry(out, dn, &user)?;
        }
    }
    out.flush()?;
    Ok(entries.len())
}

/// Every entry record of every shard's view.
fn read_records(cut: &Cut) -> anyhow::Result<Vec<(EntryId, EntryRecord)>> {
    let mut records = Vec::new();
    for (index, view) in cut.views.iter().enumerate() {
        let mut failure = None;
        offline::each_entry(view.as_ref(), &mut |stored| match stored {
            Stored::Entry(id, record) => {
                records.push((id, record));
                true
            }
            Stored::Undecodable(id, e) => {
                failure = Some(anyhow::anyhow!("shard {index}, entry {id:?}: {e}"));
                false
            }
            Stored::BadKey(key) => {
                failure = Some(anyhow::anyhow!("shard {index}: malformed entry key {key:02x?}"));
                false
            }
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok(records)
}

fn depth(tree: &Skeleton, mut parent: EntryId) -> usize {
    let mut depth = 0;
    while parent != EntryId::ROOT && depth < 1024 {
        depth += 1;
        parent = tree.get(parent).map(|n| n.parent).unwrap_or(EntryId::ROOT);
    }
    depth
}

/// `ferrodir export`: asks the serving server through its admin socket when one answers,
/// else reads the data directory itself. Writes the LDIF to standard output and the summary
/// to standard error.
pub fn run_command(
    config: &crate::config::Config,
    data_dir: &std::path::Path,
    options: ExportOptions,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let summary = match crate::admin::client::connect(data_dir)? {
        Some(stream) => crate::admin::client::call(
            stream,
            &crate::admin::Request::Export { operational: options.operational },
            &mut out,
        )?,
        // Nothing to export, and nothing created: opening would make a new, empty data
        // directory. Not an error, as before (a failed import leaves no directory, and its
        // export is the empty LDIF), but said plainly, for a mistyped path.
        None if crate::data::manifest::Manifest::load(data_dir)?.is_none() => {
            format!("exported 0 entries: no data directory at {}", data_dir.display())
        }
        None => {
            // A damaged shard is left out, so that what can be read is saved: the recovery a
            // refused start prints. The summary names what is missing.
            let store = crate::data::store::Store::open_salvaging(config, data_dir)?;
            let count = export(&Cut::offline(&store, data_dir)?, &store.rules, options, &mut out)?;
            match store.damaged.iter().map(|(shard, _)| format!("shard {shard}")).collect::<Vec<_>>() {
                left_out if left_out.is_empty() => format!("exported {count} entries"),
                left_out => format!("exported {count} entries; left out, damaged: {}", left_out.join(", ")),
            }
        }
    };
    out.flush()?;
    eprintln!("{summary}");
    Ok(())
}
