//! HTML escaping: the one function every page of the relay and of `grasp-cgi` puts text through
//! (names, descriptions, identifiers, URLs, paths: all of it may come from the network).

/// Escapes `s` for HTML element content and for double- or single-quoted attribute values.
/// Control characters other than tab, newline and carriage return are dropped (they have no
/// business on a page and some are invalid in HTML).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;
    use proptest::prelude::*;

    /// Undoes [`escape`] (for the round-trip property).
    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    #[test]
    fn hostile_text_becomes_inert() {
        assert_eq!(
            escape("<script>alert(\"x\")</script> & 'y'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(escape("a\u{0}b\u{1b}c\n"), "abc\n");
        assert_eq!(escape("&amp;"), "&amp;amp;");
    }

    proptest! {
        #[test]
        fn output_has_no_markup_characters(s in any::<String>()) {
            let e = escape(&s);
            prop_assert!(!e.contains(['<', '>', '"', '\'']));
            // Every `&` starts one of the five entities.
            for (i, _) in e.match_indices('&') {
                let rest = &e[i..];
                prop_assert!(["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"].iter().any(|x| rest.starts_with(x)), "{e}");
            }
        }

        #[test]
        fn text_without_controls_round_trips(s in "[^\\p{Cc}]*") {
            prop_assert_eq!(unescape(&escape(&s)), s);
        }
    }
}
