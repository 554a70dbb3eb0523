//! The effective size and time limits of a search: the client's, capped by its identity
//! class's (`crate::limits`), none of the class's for the rootDN.

use std::time::Duration;

use ferrodir_proto::message::SearchRequest;

use crate::op::context::OpContext;
use crate::op::paged::Paging;
use crate::op::read::Bounds;
use crate::requester::Identity;

/// The bounds of `request`. A paged search (slapd's size.pr and size.prtotal) has its page
/// cut to the class's page size, and its size limit counts across the whole search.
pub(super) fn bounds<'a>(
    ctx: &'a OpContext,
    request: &SearchRequest,
    paging: Option<&mut Paging>,
) -> Bounds<'a> {
    let class = ctx.config.limits_for(&ctx.identity);
    let size_limit = match paging {
        Some(paging) => {
            if class.paged_page_entries_max != 0 {
                paging.size = paging.size.min(class.paged_page_entries_max);
            }
            limit(request.size_limit, class.paged_total_entries_max, &ctx.identity)
        }
        None => limit(request.size_limit, class.search_entries_max, &ctx.identity),
    };
    let time_limit = limit(request.time_limit, class.search_time_max_s, &ctx.identity);
    let deadline = time_limit.map(|s| tokio::time::Instant::now() + Duration::from_secs(u64::from(s)));
    Bounds { class, size_limit, deadline }
}

/// The effective limit: the client's, capped by the server's for everyone but the rootDN.
fn limit(client: u32, server: u32, identity: &Identity) -> Option<u32> {
    let server = if matches!(identity, Identity::Root(_)) || server == 0 { None } else { Some(server) };
    match (client, server) {
        (0, s) => s,
        (c, Some(s)) => Some(c.min(s)),
        (c, None) => Some(c),
    }
}
