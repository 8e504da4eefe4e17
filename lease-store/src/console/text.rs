//! Recorded text made safe to look at (`docs/console.md#what-it-shows`).
//!
//! HTML escaping (by `maud`, in [`super::pages`]) keeps a recorded `<script>` from running,
//! but not every hostile character is markup: a bidi override reorders what the operator
//! reads (so `evil.example` can display as something else), a line or paragraph separator
//! or another control character hides text or breaks a line where none shows. Each such
//! character is shown as its code point instead, `\u{202e}`; tabs and newlines stay.

/// `text` with every invisible or reordering character written as `\u{…}`.
pub fn visible(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// Control characters (but tab and newline), bidi controls, zero-width characters and
/// line and paragraph separators.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_and_invisible_characters_show_as_code_points() {
        assert_eq!(
            visible("pay\u{202e}lpt.exe\u{2028}x\u{0}y"),
            "pay\\u{202e}lpt.exe\\u{2028}x\\u{0}y"
        );
        assert_eq!(visible("line\n\tindented <b>"), "line\n\tindented <b>");
        assert_eq!(
            visible("\u{2066}\u{feff}\u{200b}"),
            "\\u{2066}\\u{feff}\\u{200b}"
        );
    }
}
