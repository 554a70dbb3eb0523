//! The data directory's manifest: the facts fixed when it was created. Entries are placed
//! by shard count and placement version, and keyed by the normalisation rules, so a server
//! built or configured differently must not open it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "ferrodir-manifest.toml";
/// The coordinator's intent log in a data directory: the server opens it, a cut reads it,
/// a backup copies it, compaction skips it. Named here, with the manifest, so that none of
/// them takes it from another.
pub const INTENT_LOG_FILE: &str = "coordinator.redb";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub shards: usize,
    pub placement_version: u32,
    pub normalization_version: u32,
    pub engine: String,
}

impl Manifest {
    pub fn current(shards: usize, engine: &str) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            shards,
            placement_version: ferrodir_shard::PLACEMENT_VERSION,
            normalization_version: ferrodir_proto::value::NORMALIZATION_VERSION,
            engine: engine.to_string(),
        }
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    pub fn load(dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = Self::path(dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad manifest {}: {e}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }

    /// Writes the manifest durably (temp file, fsync, rename, fsync the directory).
    pub fn store(&self, dir: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        let text = toml::to_string(self)?;
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, Self::path(dir))?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }

    /// Refuses a data directory made with other placement or normalisation rules, another
    /// engine, or (when `shards_wanted` is set) another shard count.
    pub fn check(&self, dir: &Path, shards_wanted: Option<usize>, engine: &str) -> anyhow::Result<()> {
        let way_out = format!(
            "to change it, export the data (`ferrodir export --data-dir {0} > data.ldif`) and import it into a new data directory (`ferrodir import --data-dir NEW data.ldif`)",
            dir.display()
        );
        let expected = Self::current(shards_wanted.unwrap_or(self.shards), engine);
        let mut problems = Vec::new();
        if self.format_version != expected.format_version {
            problems.push(format!(
                "format version {} (this server: {})",
                self.format_version, expected.format_version
            ));
        }
        if self.shards != expected.shards {
            problems.push(format!("{} shards (config asks for {})", self.shards, expected.shards));
        }
        if self.placement_version != expected.placement_version {
            problems.push(format!(
                "placement version {} (this server: {})",
                self.placement_version, expected.placement_version
            ));
        }
        if self.normalization_version != expected.normalization_version {
            problems.push(format!(
                "normalisation version {} (this server: {})",
                self.normalization_version, expected.normalization_version
            ));
        }
        if self.engine != expected.engine {
            problems.push(format!("engine {} (config asks for {})", self.engine, expected.engine));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            anyhow::bail!(
                "data directory {} was created with {}; {}",
                dir.display(),
                problems.join(", "),
                way_out
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_names_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::current(4, "redb").store(dir.path()).unwrap();
        let loaded = Manifest::load(dir.path()).unwrap().unwrap();
        assert!(loaded.check(dir.path(), Some(4), "redb").is_ok());
        assert!(loaded.check(dir.path(), None, "redb").is_ok());
        let err = loaded.check(dir.path(), Some(8), "redb").unwrap_err().to_string();
        assert!(err.contains("4 shards") && err.contains("ferrodir export"), "{err}");
    }
}
