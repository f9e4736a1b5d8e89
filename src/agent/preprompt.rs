//! The system preamble placed first in every chat turn: the tools on offer, the date and time
//! in the user's time zone, and how to use tools well. `[agent] preprompt` replaces the text;
//! `{tools}` and `{now}` in it are filled in the same way.

/// The built-in preamble. `{now}` becomes the date and time in the user's time zone,
/// `{tools}` the comma-separated function names the model may call (or `none`).
pub const DEFAULT_PREPROMPT: &str = "\
You are a helpful assistant. You can call tools through a gateway that checks every call.

Current date and time: {now}.
Available tools: {tools}.

How to use tools:
- Call a tool only for what you cannot do yourself: do not call tools for writing, \
summarizing, translating, coding or arithmetic you can do directly.
- When you need several calls that do not depend on each other, make them together in one \
reply: they run at the same time.
- Images from tools are shown to the user and named image_1, image_2, ... in the order they \
arrive. Refer to an image by its name; never write out image data or base64.
- A failed call comes back as an error that says what happened (refused, limit reached, timed \
out, declined by the user). Do not retry a call the user declined; tell the user instead.";

/// The preamble for one turn: `template` (the default when `None`) with `{now}` and `{tools}`
/// filled in.
pub fn preprompt(template: Option<&str>, tools: &[String], now: &str) -> String {
    let tools = if tools.is_empty() {
        "none".to_owned()
    } else {
        tools.join(", ")
    };
    template
        .unwrap_or(DEFAULT_PREPROMPT)
        .replace("{now}", now)
        .replace("{tools}", &tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_the_placeholders() {
        let text = preprompt(
            None,
            &["demo_echo".into(), "demo_add".into()],
            "Monday 2026-11-30 09:00 (UTC+00:00)",
        );
        assert!(text.contains("Available tools: demo_echo, demo_add."));
        assert!(text.contains("Current date and time: Monday 2026-11-30 09:00 (UTC+00:00)."));
        assert!(text.contains("image_1"));
        assert!(!text.contains('{'));
        let custom = preprompt(Some("Tools: {tools}. Now: {now}."), &[], "noon");
        assert_eq!(custom, "Tools: none. Now: noon.");
    }
}
