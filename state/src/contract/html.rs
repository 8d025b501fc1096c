//! What the web pages of the relay (home page) and of `grasp-cgi` (repository page, 404) share:
//! the one HTML escaping function every piece of text goes through (names, descriptions,
//! identifiers, URLs, paths: all of it may come from the network), the style sheet, and dates.
//! Pages are plain HTML with this small inline style and no JavaScript.

/// The inline style sheet of every page.
pub const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:62rem;margin:2rem auto;padding:0 1rem;\
line-height:1.45;color:#1d2330;background:#fbfbfd}h1{margin-bottom:.2rem}h2{margin-top:1.8rem;\
border-bottom:1px solid #dde;padding-bottom:.2rem}code,pre{font-family:ui-monospace,monospace;\
background:#eef0f5;border-radius:4px}code{padding:.05rem .3rem}pre{padding:.6rem .8rem;overflow-x:auto}\
.muted{color:#5d6475}.repo{padding:.6rem 0;border-bottom:1px solid #e4e6ee}.repo a{font-weight:600}\
table{border-collapse:collapse}td,th{text-align:left;padding:.15rem .8rem .15rem 0;vertical-align:top}\
a{color:#2450b3}nav a{margin-right:1rem}td code{overflow-wrap:anywhere}th{white-space:nowrap}";

/// `secs` (Unix time) as `YYYY-MM-DD HH:MM UTC`.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

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

    #[test]
    fn dates() {
        assert_eq!(super::format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::format_utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(super::format_utc(1_796_286_447), "2026-12-03 08:27 UTC");
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
