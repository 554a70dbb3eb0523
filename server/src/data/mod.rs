//! The data directory and the commands that work on it: opening it (`store`), its manifest
//! and file names (`manifest`), LDIF import (`import`, `load`: the pipeline up to each
//! shard's bulk loader, which the shard crate holds) and export
//! (`export`), the consistent cut (`cut`), backup and restore (`backup`), offline compaction
//! (`compact`), `reindex` and `verify`; the example entries a new directory may start with
//! (`example`).

pub mod backup;
pub mod compact;
pub mod cut;
pub mod example;
pub mod export;
pub mod import;
pub mod load;
pub mod manifest;
pub mod reindex;
pub mod startcache;
pub mod store;
pub mod verify;
