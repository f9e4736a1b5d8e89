//! Listing every page of a server's tools, prompts, resources or resource templates, within
//! bounds: a server that lists without end (a cursor forever, 100 000 tools, pages of huge
//! definitions) is refused with a typed error once it passes them, instead of growing the
//! gateway's memory until the list deadline.

use std::{collections::HashSet, future::Future};

use rmcp::{
    RoleClient, ServiceError,
    model::{
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, Prompt, Resource, ResourceTemplate, Tool,
    },
    service::Peer,
};
use serde::Serialize;

use super::UpstreamError;
use crate::config::Limits;

/// How much of one listing the gateway keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListBounds {
    /// Most items (tools, prompts, ...) over all pages.
    pub max_items: usize,
    /// Most bytes of the items' JSON over all pages.
    pub max_bytes: usize,
}

impl From<&Limits> for ListBounds {
    fn from(limits: &Limits) -> Self {
        ListBounds {
            max_items: limits.max_list_items,
            max_bytes: limits.max_list_bytes,
        }
    }
}

/// Why a listing was refused although every page arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListRefused {
    #[error("the server lists more than {max} {what} (limits.max_list_items)")]
    TooManyItems { what: &'static str, max: usize },
    #[error("the server's {what} take more than {max} bytes (limits.max_list_bytes)")]
    TooManyBytes { what: &'static str, max: usize },
    #[error("the server handed out the same {what} cursor twice")]
    CursorRepeated { what: &'static str },
    #[error("the server's {what} take more than {max} pages (limits.max_list_items)")]
    TooManyPages { what: &'static str, max: usize },
}

impl From<ListRefused> for UpstreamError {
    fn from(refused: ListRefused) -> Self {
        UpstreamError::ListRefused(refused)
    }
}

/// One page of a list result.
pub(crate) trait Page {
    type Item: Serialize;
    /// What the items are, for errors: "tools", "prompts", ...
    const WHAT: &'static str;
    fn into_page(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! page {
    ($page:ty, $item:ty, $field:ident, $what:literal) => {
        impl Page for $page {
            type Item = $item;
            const WHAT: &'static str = $what;
            fn into_page(self) -> (Vec<$item>, Option<String>) {
                (self.$field, self.next_cursor)
            }
        }
    };
}

page!(ListToolsResult, Tool, tools, "tools");
page!(ListPromptsResult, Prompt, prompts, "prompts");
page!(ListResourcesResult, Resource, resources, "resources");
page!(
    ListResourceTemplatesResult,
    ResourceTemplate,
    resource_templates,
    "resource templates"
);

/// Follows `nextCursor` from the first page to the last, keeping at most `bounds`; a cursor
/// seen before ends the listing (a loop is a listing without end), and so does a page count
/// over the item bound (empty pages without end). The outer error is the
/// protocol's, the inner one the bounds'.
pub(crate) async fn all_pages<P, F, Fut>(
    bounds: ListBounds,
    mut list_page: F,
) -> Result<Result<Vec<P::Item>, ListRefused>, ServiceError>
where
    P: Page,
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<P, ServiceError>>,
{
    let mut items = Vec::new();
    let mut bytes = 0usize;
    let mut cursors = HashSet::new();
    let mut cursor: Option<String> = None;
    for _page in 0..=bounds.max_items {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (page, next) = list_page(params).await?.into_page();
        if items.len() + page.len() > bounds.max_items {
            return Ok(Err(ListRefused::TooManyItems {
                what: P::WHAT,
                max: bounds.max_items,
            }));
        }
        for item in &page {
            bytes = bytes.saturating_add(json_len(item));
        }
        if bytes > bounds.max_bytes {
            return Ok(Err(ListRefused::TooManyBytes {
                what: P::WHAT,
                max: bounds.max_bytes,
            }));
        }
        items.extend(page);
        match next {
            None => return Ok(Ok(items)),
            Some(next) if !cursors.insert(next.clone()) => {
                return Ok(Err(ListRefused::CursorRepeated { what: P::WHAT }));
            }
            Some(next) => {
                // Cursors are kept (to see a loop), so they count as listed bytes too.
                bytes = bytes.saturating_add(next.len());
                cursor = Some(next);
            }
        }
    }
    // Pages without items, each pointing to a new one: as many pages as items allowed.
    Ok(Err(ListRefused::TooManyPages {
        what: P::WHAT,
        max: bounds.max_items,
    }))
}

/// Every tool `peer` lists, within `bounds`.
pub(crate) async fn tools(
    peer: &Peer<RoleClient>,
    bounds: ListBounds,
) -> Result<Result<Vec<Tool>, ListRefused>, ServiceError> {
    all_pages(bounds, |params| peer.list_tools(params)).await
}

/// Every prompt `peer` lists, within `bounds`.
pub(crate) async fn prompts(
    peer: &Peer<RoleClient>,
    bounds: ListBounds,
) -> Result<Result<Vec<Prompt>, ListRefused>, ServiceError> {
    all_pages(bounds, |params| peer.list_prompts(params)).await
}

/// Every resource `peer` lists, within `bounds`.
pub(crate) async fn resources(
    peer: &Peer<RoleClient>,
    bounds: ListBounds,
) -> Result<Result<Vec<Resource>, ListRefused>, ServiceError> {
    all_pages(bounds, |params| peer.list_resources(params)).await
}

/// Every resource template `peer` lists, within `bounds`.
pub(crate) async fn resource_templates(
    peer: &Peer<RoleClient>,
    bounds: ListBounds,
) -> Result<Result<Vec<ResourceTemplate>, ListRefused>, ServiceError> {
    all_pages(bounds, |params| peer.list_resource_templates(params)).await
}

/// The length of `item`'s JSON, counted without keeping the text.
fn json_len(item: &impl Serialize) -> usize {
    let mut count = crate::policy::ByteCounter(0);
    // Writing an rmcp model type to a sink that never fails cannot fail; were it to, the
    // item counts as too large rather than as free.
    match serde_json::to_writer(&mut count, item) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::fixtures::demo::tools::no_args_schema;

    fn tool(i: usize) -> Tool {
        Tool::new(format!("t{i}"), "A tool.", no_args_schema())
    }

    const WIDE: ListBounds = ListBounds {
        max_items: 10_000,
        max_bytes: 32 * 1024 * 1024,
    };

    /// Pages of `per_page` tools; the cursor of page n is `p{n}`; `pages` pages in all
    /// (`None`: without end).
    fn pages(
        per_page: usize,
        pages: Option<usize>,
        asked: &AtomicUsize,
    ) -> impl FnMut(
        Option<PaginatedRequestParams>,
    ) -> std::future::Ready<Result<ListToolsResult, ServiceError>> {
        move |params| {
            asked.fetch_add(1, Ordering::Relaxed);
            let n: usize = params
                .and_then(|p| p.cursor)
                .map_or(0, |c| c[1..].parse().expect("our cursor"));
            let mut page = ListToolsResult::with_all_items(
                (0..per_page).map(|i| tool(n * per_page + i)).collect(),
            );
            page.next_cursor = pages
                .is_none_or(|p| n + 1 < p)
                .then(|| format!("p{}", n + 1));
            std::future::ready(Ok(page))
        }
    }

    #[tokio::test]
    async fn every_page_is_followed_to_the_last() {
        let asked = AtomicUsize::new(0);
        let tools = all_pages(WIDE, pages(10, Some(3), &asked))
            .await
            .expect("no protocol error")
            .expect("within bounds");
        assert_eq!(tools.len(), 30);
        assert_eq!(tools[29].name, "t29");
        assert_eq!(asked.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_listing_without_end_stops_at_the_item_bound() {
        let asked = AtomicUsize::new(0);
        let refused = all_pages(WIDE, pages(1_000, None, &asked))
            .await
            .expect("no protocol error")
            .expect_err("refused");
        assert_eq!(
            refused,
            ListRefused::TooManyItems {
                what: "tools",
                max: 10_000
            }
        );
        // Ten pages fit; the eleventh is the one over.
        assert_eq!(asked.load(Ordering::Relaxed), 11);
    }

    #[tokio::test]
    async fn exactly_the_bound_is_accepted() {
        let asked = AtomicUsize::new(0);
        let bounds = ListBounds {
            max_items: 30,
            ..WIDE
        };
        let tools = all_pages(bounds, pages(10, Some(3), &asked)).await;
        assert_eq!(tools.expect("ok").expect("within bounds").len(), 30);
    }

    #[tokio::test]
    async fn big_definitions_stop_at_the_byte_bound() {
        let asked = AtomicUsize::new(0);
        let one = json_len(&tool(0));
        let bounds = ListBounds {
            max_items: 10_000,
            max_bytes: one * 25,
        };
        let refused = all_pages(bounds, pages(10, None, &asked))
            .await
            .expect("no protocol error")
            .expect_err("refused");
        assert!(
            matches!(refused, ListRefused::TooManyBytes { .. }),
            "{refused:?}"
        );
        assert_eq!(asked.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_cursor_handed_out_twice_ends_the_listing() {
        // Empty pages that always point to the same next page: no item bound is ever reached.
        let refused = all_pages(WIDE, |_params| {
            let mut page = ListToolsResult::with_all_items(Vec::new());
            page.next_cursor = Some("again".to_owned());
            std::future::ready(Ok::<_, ServiceError>(page))
        })
        .await
        .expect("no protocol error")
        .expect_err("refused");
        assert_eq!(refused, ListRefused::CursorRepeated { what: "tools" });
    }

    #[test]
    fn json_len_is_the_length_of_the_text() {
        let t = tool(7);
        assert_eq!(json_len(&t), serde_json::to_vec(&t).expect("json").len());
    }
}
