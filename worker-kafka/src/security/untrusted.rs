//! Text from the other side (a broker's SASL message, a token endpoint's error) made safe to put
//! in an error message or a log line: bounded, quoted, control characters escaped.

/// `text` cut to `max` characters (an ellipsis says so), quoted and escaped as Rust's `Debug`
/// does, so a hostile peer can neither flood a log nor forge lines in it.
pub(crate) fn quote(text: &str, max: usize) -> String {
    let mut cut: String = text.chars().take(max).collect();
    if text.chars().nth(max).is_some() {
        cut.push('…');
    }
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_bounded_and_escaped() {
        assert_eq!(quote("invalid_token", 20), "\"invalid_token\"");
        assert_eq!(quote("abcdef", 3), "\"abc…\"");
        assert_eq!(quote("a\nb\u{1}", 10), "\"a\\nb\\u{1}\"");
    }
}
