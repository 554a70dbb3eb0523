//! The data directory and the commands that work on it: opening it (`store`), its manifest
//! and file names (`manifest`), the index-ready marks (`index_marks`), LDIF import (`import`,
//! `load`: the pipeline; `import_sort`: each shard's keys sorted before redb) and export
//! (`export`), the consistent cut (`cut`), backup and restore (`backup`), offline compaction
//! (`compact`), `reindex` and `verify`.

pub mod backup;
pub mod compact;
pub mod cut;
pub mod export;
pub mod import;
pub mod import_sort;
pub mod index_marks;
pub mod load;
pub mod manifest;
pub mod reindex;
pub mod store;
pub mod verify;
