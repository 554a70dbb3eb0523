//! The write path: staging a batch against uncommitted state, applying a Modify, the keys a
//! stored entry writes, the steps of an online index build, the operational attributes every write stamps, the commit thread,
//! and what committed writes publish (the watermark hub, the delete log, the retro changelog).

pub(crate) mod batch;
pub(crate) mod changelog;
pub(crate) mod clock;
pub(crate) mod commit;
pub(crate) mod deletelog;
pub(crate) mod indexing;
pub(crate) mod layout;
pub(crate) mod modify;
pub(crate) mod stamp;
pub(crate) mod update;
pub(crate) mod watermark;
