//! How an entry is stored, cached and sent: its stored record, the compact form the entry
//! cache keeps, the pre-encoded attribute segments a SearchResultEntry is written from, and
//! the bounds-checked binary codec under all three.

pub(crate) mod ber;
pub(crate) mod codec;
pub(crate) mod compactentry;
pub(crate) mod record;
pub(crate) mod segments;
