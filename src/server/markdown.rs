//! Model, tool and upstream text is untrusted: Markdown is rendered to HTML and then
//! sanitized with an allowlist (ammonia), so no script, event handler, `javascript:` URL or
//! raw HTML from a model ever reaches the page as markup.

use std::sync::LazyLock;

use pulldown_cmark::{Options, Parser, html};

/// Largest input rendered; longer text is cut (at a character boundary) before rendering.
pub const MAX_MARKDOWN_BYTES: usize = 256 * 1024;

static SANITIZER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::default();
    builder
        // http(s) and mailto only: no `javascript:`, `data:` or relative tricks.
        .url_schemes(["http", "https", "mailto"].into_iter().collect())
        .link_rel(Some("noopener noreferrer nofollow"))
        // Images would fetch from anywhere the model names: the page shows them as links.
        .rm_tags(["img"]);
    builder
});

/// Renders Markdown (CommonMark with tables, strikethrough and task lists) to sanitized HTML.
pub fn render(markdown: &str) -> String {
    let mut end = markdown.len().min(MAX_MARKDOWN_BYTES);
    while !markdown.is_char_boundary(end) {
        end -= 1;
    }
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut unsafe_html = String::with_capacity(end + end / 4);
    html::push_html(&mut unsafe_html, Parser::new_ext(&markdown[..end], options));
    SANITIZER.clean(&unsafe_html).to_string()
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn renders_markdown() {
        let html = render("# Title\n\n**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("<code>code</code>"), "{html}");
        assert!(html.contains("<table>"), "{html}");
    }

    #[test]
    fn raw_html_and_script_urls_are_inert() {
        let html = render(
            "<img src=x onerror=alert(1)> <script>alert(2)</script> [x](javascript:alert(3)) \
             <a href=\"javascript:alert(4)\" onclick=\"alert(5)\">y</a> ![i](http://example.com/i.png)",
        );
        for bad in [
            "<img",
            "onerror",
            "<script",
            "javascript:",
            "onclick",
            "alert(2)",
        ] {
            assert!(!html.contains(bad), "{bad} survived: {html}");
        }
    }

    #[test]
    fn links_get_a_safe_rel() {
        let html = render("[site](https://example.com)");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
        assert!(
            html.contains("rel=\"noopener noreferrer nofollow\""),
            "{html}"
        );
    }

    #[test]
    fn long_input_is_cut_at_a_char_boundary() {
        let text = "é".repeat(super::MAX_MARKDOWN_BYTES);
        let html = render(&text);
        assert!(html.len() <= super::MAX_MARKDOWN_BYTES + 16);
    }
}
